"""The CPU paths the tests' float32 kernels take: AVX2 ones, which every x86-64 machine with AVX2 can take.

How a float32 matrix product or reduction rounds depends on the kernel the library picks for the
CPU: MKL takes its AVX-512 kernels on an Intel CPU that has them and AVX2 ones on AMD's, PyTorch's
own kernels (ATen) and OpenBLAS (NumPy's) pick by the instruction set too. Two rounds of training a
preset then end a metric apart (one user's hit moves HR@10 by 1/27 on the golden runs' 27 users).
Found on 2026-11-28: ``tests/golden/presets.json``, whose lines were written by several sessions
on different machines, failed at least six of its 48 sampled lines on an Intel Xeon with AVX-512,
and no single choice of MKL's or ATen's path reproduced every line (``docs/results.md``, "Float32 comparisons
across CPU paths"). The golden lines are now written on these paths, which every x86-64 CPU with
AVX2 can take: MKL's conditional numerical reproducibility mode for AVX2 (``MKL_CBWR``, the same
code path and blocking on Intel and AMD), ATen's AVX2 kernels, OpenBLAS's Haswell kernels and
oneDNN held to AVX2.

:func:`pin` sets them (each unless it is set already) before anything loads those libraries: the
test session's ``conftest.py`` and ``python -m tests.golden`` call it first; subprocesses inherit them.

They narrow the differences between machines, they do not remove them: on an AMD EPYC (2026-11-28)
four NCF lines written on an Intel Xeon came out with one or two users' candidates reordered, so the
golden test allows that much on the metrics of CPU-sensitive models (``tests/golden.py``,
``CPU_SENSITIVE_MODELS``) and nothing elsewhere.
"""

from __future__ import annotations

import os
import sys
import warnings

PATHS = {"MKL_CBWR": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
         "OPENBLAS_CORETYPE": "Haswell", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def pin() -> None:
    loaded = sorted({"torch", "numpy"} & set(sys.modules))
    if loaded:   # too late for this process (they read the variables when they load); subprocesses still get them
        warnings.warn(f"tests/cpu_paths.pin(): {loaded} already imported (by a pytest plugin?): this process's "
                      "kernels are the machine's default, and golden lines may differ", stacklevel=2)
    for name, value in PATHS.items():
        os.environ.setdefault(name, value)
