"""The ``corolla run`` arguments after ``--`` of a benchmark that instruments a run in its own process
(``fedca_init.py run``, ``fedatt_attention.py``)."""

from __future__ import annotations


def corolla_run_args(args: list[str], why: str) -> tuple[list[str], str]:
    """(the arguments without a leading ``--``, the preset); a clear error unless they name
    ``--preset P`` and ``--mode inproc`` (``why``: what must run in this process)."""
    rest = args[1:] if args[:1] == ["--"] else list(args)
    if "--preset" not in rest or rest.index("--preset") + 1 >= len(rest):
        raise SystemExit("after --: expected corolla run arguments with --preset P")
    if "--mode" not in rest or rest[rest.index("--mode") + 1:rest.index("--mode") + 2] != ["inproc"]:
        raise SystemExit(f"after --: expected --mode inproc ({why})")
    return rest, rest[rest.index("--preset") + 1]
