"""Every summary.json says what produced it (``corolla/provenance.py``)."""

import subprocess
from pathlib import Path

from corolla import provenance
from launcher.inproc import InProcessTransport, partitions
from server_app.app import run_federation

ROOT = Path(__file__).resolve().parents[1]


def test_summary_carries_provenance(tmp_path, data_dir):
    t = InProcessTransport(partitions(2, {"data-dir": data_dir}))
    s = run_federation(t, {"preset": "fedavg-mf-ml100k", "out-dir": str(tmp_path / "p"), "data-dir": data_dir,
                           "set": "num-rounds=1 split=loo partition=blocks num-clients=4 protocol=loo dim=8 "
                                  "loss=bpr train-samples=per-positive compat-fedcia-metrics=false "
                                  "select-metric=ndcg@10 patience=0"})
    p = s["provenance"]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if head:   # a checkout (CI's clone is one)
        assert p["code"]["commit"] == head and isinstance(p["code"]["dirty"], bool)
    assert {"python", "flwr", "torch", "numpy"} <= set(p["versions"])
    assert p["mode"] == "InProcessTransport" and p["nodes"] == 2 and len(p["config_hash"]) == 16
    assert p["machine"]["cores"] >= 1 and p["command"]


def test_outside_a_checkout_the_package_version(tmp_path):
    assert "version" in provenance.code(tmp_path)
