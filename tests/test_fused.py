"""Fused evaluation (``fused-evaluation``, the default): a round's evaluation travels inside the
round's messages instead of a separate ``evaluate`` message, and the evaluated models are exactly
the same. Every preset, shrunk so that it runs in seconds, gives the same metrics to the last
digit with and without it (in process), and the fused run sends one message per node per round.
"""

import json

import pytest

from corolla.config import list_presets, resolve
from server_app.app import run_federation
from tests.inproc import InProcessTransport, partitions
from tests.sample import message_group, sample

# one preset per shape of the round's messages (tests/sample.py, message_group: 27 presets, where one
# per code path, as tests/test_golden.py runs them, is 49); all presets: COROLLA_ALL_PRESETS=1
PRESETS = sample([p.name for p in list_presets()], key=message_group)


def shrink(preset: str) -> str:
    """Overrides that keep a preset's method, model, protocol and switches but make it small."""
    cfg = resolve(preset)
    out = ["num-rounds=2"]
    if cfg["dataset"] == "gowalla" and cfg["model"] != "lgcn":
        # LPSFed's per-user baselines: the spectral partition and full ranking of Gowalla's 29,858
        # users over 40,981 items take minutes a round (FedPerGNN's evaluation alone ran past the
        # 900 s timeout); ML-100K with a ratio split keeps the partition, harness and protocol
        # (tests/golden.py, REDUCE, the same overrides)
        out += ["dataset=ml-100k", "split=ratio", 'split-ratios="0.81,0.09,0.1"']
        cfg = {**cfg, "dataset": "ml-100k", "split": "ratio"}
    if cfg["harness"] == "one-user":
        out.append("local-epochs=1")
        if cfg["split"] == "fedcia":   # FedCIA's split keeps all 943 users: a random one of the heavy ones
            out.append("split=ratio")
        out.append("min-user-interactions=300" if cfg["dataset"] == "ml-100k" else "min-user-interactions=150")
    if cfg["method"] == "central":   # one client holding every user: its 54 heaviest users only
        out.append("min-user-interactions=300")
    if cfg["method"] in ("fedavg", "fcf") and cfg["harness"] == "silo" and cfg["dim"] > 64:
        out.append("dim=16")
    if cfg["split"] == "fedcia" and cfg["method"] != "fedavg" and cfg["harness"] != "one-user":
        out += ["partition=blocks", "num-clients=4"]
    if cfg["method"] in ("fedcia", "local") and cfg["model"] != "gfcf" and cfg["harness"] == "silo":
        out.append("dim=8")
        if cfg["method"] == "fedcia":   # FedCIA's own keys (Local's run holds only Local's)
            out += ["finetune-steps=2", "svd-rank=0"]
        if cfg["model"] == "ncf":
            out.append('mlp-layers="16,8"')
        if cfg["client-models"]:
            parts = [p.partition(":")[0] for p in cfg["client-models"].split("|")]
            out.append("client-models=" + json.dumps("|".join(f"{p}:8" for p in parts)))
    if cfg["harness"] == "expanded":
        out += ["local-epochs=2", "clients-per-round=10"]
        if cfg["dataset"] == "ml-1m":   # ML-1M's ratings are not in the offline data directory
            out.append("dataset=ml-100k")
    if cfg["model"] == "lgcn":   # spectral partition + eigenvectors of Gowalla/ML-1M take minutes
        out += ["dataset=ml-100k", "split=ratio", 'split-ratios="0.81,0.09,0.1"', "lgcn-phi=16",
                "local-epochs=1", "lpsfed-freeze-epochs=1", "batch-size=2048", "eval-every=1"]
    return " ".join(out)


def _run(tmp_path, preset, data_dir, extra, name, nodes=2):
    t = InProcessTransport(partitions(nodes, {"data-dir": data_dir}))
    out = tmp_path / name
    s = run_federation(t, {"preset": preset, "set": f"{shrink(preset)} {extra}", "out-dir": str(out),
                           "data-dir": data_dir})
    rounds = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    return s, rounds


@pytest.mark.parametrize("preset", PRESETS)
def test_fused_evaluation_gives_the_same_metrics(tmp_path, data_dir, preset):
    fused, rf = _run(tmp_path, preset, data_dir, "", "fused")
    plain, rp = _run(tmp_path, preset, data_dir, "fused-evaluation=false", "plain")
    assert fused["status"] == plain["status"] == "completed"
    assert fused["rounds_completed"] == plain["rounds_completed"]
    assert fused["metrics"] == plain["metrics"] and fused["valid_metrics"] == plain["valid_metrics"]
    assert fused.get("metrics_paper_compat") == plain.get("metrics_paper_compat")
    for a, b in zip(rf, rp):   # every round, not only the selected one
        assert a.get("metrics") == b.get("metrics") and a.get("valid") == b.get("valid"), a["round"]
    assert fused["bytes_up"] == plain["bytes_up"]
    # one exchange per phase in every round but the last, which adds the final evaluation; a
    # round followed by one without phases (one-shot GF-CF) evaluates on its own
    for r, nxt in zip(rf[:-1], rf[1:]):
        n_phases = len([p for p in r["phases"] if p["name"] != "evaluate"])
        carried = any(p["name"] != "evaluate" for p in nxt["phases"])
        assert len(r["phases"]) == (n_phases if carried else n_phases + 1), r


def test_early_stop_with_fused_evaluation_equals_separate_messages(tmp_path, data_dir):
    """An early stop decided by a fused evaluation: the next round was already trained by the
    clients and is discarded; the run, its selected round and its top-K export are those of the
    run with separate evaluation messages."""
    extra = "num-rounds=12 patience=1 select-metric=ndcg@10 lr=0.5 export-topk=5"
    fused, rf = _run(tmp_path, "fedavg-mf-ml100k", data_dir, extra, "fused")
    plain, rp = _run(tmp_path, "fedavg-mf-ml100k", data_dir, extra + " fused-evaluation=false", "plain")
    assert plain["stopped_early"] and plain["rounds_completed"] < 12
    assert fused["stopped_early"] and fused["rounds_completed"] == plain["rounds_completed"]
    assert fused["selection"] == plain["selection"] and fused["metrics"] == plain["metrics"]
    assert len(fused["discarded_phases"]) == 1 and fused["bytes_up"] > plain["bytes_up"]
    assert (tmp_path / "fused" / "topk.jsonl").read_text() == (tmp_path / "plain" / "topk.jsonl").read_text()


def test_fedca_aggregates_reach_their_clients_with_the_next_training(tmp_path, data_dir):
    """FedCA's Q_g[u] of an evaluated round is the evaluation download of the aggregated clients,
    carried by the next round's train message: same bytes down as separate messages."""
    fused, rf = _run(tmp_path, "fedca-pmf-ml100k", data_dir, "num-rounds=3", "fused")
    plain, rp = _run(tmp_path, "fedca-pmf-ml100k", data_dir, "num-rounds=3 fused-evaluation=false", "plain")
    assert [p["name"] for p in rf[0]["phases"]] == ["train"]
    assert [p["name"] for p in rf[1]["phases"]] == ["train+evaluate"]
    assert [p["name"] for p in rf[2]["phases"]] == ["train+evaluate", "evaluate"]
    assert fused["bytes_down"] == plain["bytes_down"] > 0
