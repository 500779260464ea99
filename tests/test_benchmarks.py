"""The benchmark helpers that docs/results.md quotes: round_times' medians and its reference."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "round_times.py"), *args],
                          check=False, capture_output=True, text=True)


def _run_dir(tmp_path: Path, walls: list[float]) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    lines = [json.dumps({"round": i + 1, "wall_s": w,
                         "phases": [{"name": "train", "wall_s": w - 1.0}, {"name": "evaluate", "wall_s": 1.0}]})
             for i, w in enumerate(walls)]
    (d / "rounds.jsonl").write_text("\n".join(lines) + "\n")
    return d


def test_round_times_median_and_fixed_reference(tmp_path):
    d = _run_dir(tmp_path, [4.0, 10.0, 6.0])
    out = json.loads(_run(str(d), "--reference", "12").stdout)
    assert out["rounds"] == 3 and out["median_s"] == 6.0 and out["total_s"] == 20.0
    assert out["phases"]["train"]["median_s"] == 5.0
    assert out["median_over_reference"] == 0.5


def test_round_times_reference_json_uses_common_rounds(tmp_path):
    d = _run_dir(tmp_path, [4.0, 10.0, 6.0])
    ref = tmp_path / "ref.json"
    # the reference ran 2 rounds only: both medians are over rounds 1-2
    ref.write_text(json.dumps({"rounds": [{"round": 1, "round_s": 40.0}, {"round": 2, "round_s": 60.0}]}))
    out = json.loads(_run(str(d), "--reference-json", str(ref)).stdout)
    assert out["rounds"] == 2 and out["median_s"] == 7.0
    assert out["reference_s"] == 50.0
    assert abs(out["median_over_reference"] - 0.14) < 1e-12


def test_round_times_rejects_a_bad_reference(tmp_path):
    d = _run_dir(tmp_path, [4.0])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rounds": [{"round": 1}]}))
    res = _run(str(d), "--reference-json", str(bad))
    assert res.returncode != 0 and "round_s" in res.stderr
    far = tmp_path / "far.json"
    far.write_text(json.dumps({"rounds": [{"round": 9, "round_s": 1.0}]}))
    res = _run(str(d), "--reference-json", str(far))
    assert res.returncode != 0 and "no round in common" in res.stderr


def _curve_run(tmp_path: Path, tests: list[float], valids: list[float]) -> Path:
    d = tmp_path / "curve-run"
    d.mkdir()
    lines = [json.dumps({"round": i + 1, "wall_s": 2.0,
                         "compat": {"hr@10": t, "ndcg@10": t / 2},
                         "valid_compat": {"hr@10": v, "ndcg@10": v / 2}})
             for i, (t, v) in enumerate(zip(tests, valids))]
    (d / "rounds.jsonl").write_text("\n".join(lines) + "\n")
    return d


def test_compare_curves_selections_and_gap(tmp_path):
    d = _curve_run(tmp_path, tests=[0.1, 0.5, 0.5, 0.4], valids=[0.2, 0.6, 0.6, 0.1])
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"rounds": [
        {"round": r, "test_hr": t, "test_ndcg": t, "val_hr": t, "val_ndcg": t, "round_s": 20.0}
        for r, t in ((1, 0.2), (2, 0.3), (3, 0.3))]}))
    out_csv = tmp_path / "cmp.csv"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare_curves.py"), str(d), str(ref),
                          "--csv", str(out_csv)], check=False, capture_output=True, text=True)
    out = json.loads(res.stdout)
    assert out["rounds"] == 3                                   # round 4 has no reference
    assert out["ours"]["paper_compat"] == {"round": 3, "hr": 0.5, "ndcg": 0.25}   # ties: later wins
    assert out["ours"]["valid_selected"]["round"] == 2                             # ties: first wins
    assert out["reference"]["paper_compat"]["round"] == 3
    assert abs(out["mean_test_hr_gap_ours_minus_reference"] - (-0.1 + 0.2 + 0.2) / 3) < 1e-12
    assert out["ours"]["median_round_s"] == 2.0 and out["reference"]["median_round_s"] == 20.0
    assert len(out_csv.read_text().splitlines()) == 4


def test_sweep_reuses_a_run_only_if_its_config_is_what_the_preset_resolves_to_now(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import sweep
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    from corolla.config import resolve

    summary = tmp_path / "summary.json"
    assert not sweep.reusable(summary, "fedca-pmf-ml100k", ["fedca-rho=0.7"])
    cfg = resolve("fedca-pmf-ml100k", {"fedca-rho": 0.7})
    summary.write_text(json.dumps({"status": "completed", "config": cfg}))
    assert sweep.reusable(summary, "fedca-pmf-ml100k", ["fedca-rho=0.7"])
    assert not sweep.reusable(summary, "fedca-pmf-ml100k", ["fedca-rho=0.8"])
    # a run of the plain preset made before the preset was edited (same run name, older config)
    stale = dict(resolve("fedca-pmf-ml100k"))
    summary.write_text(json.dumps({"status": "completed", "config": stale}))
    assert sweep.reusable(summary, "fedca-pmf-ml100k", [])
    stale["fedca-rho"] = 0.5 if stale["fedca-rho"] != 0.5 else 0.6
    summary.write_text(json.dumps({"status": "completed", "config": stale}))
    assert not sweep.reusable(summary, "fedca-pmf-ml100k", [])
    summary.write_text(json.dumps({"status": "interrupted", "config": cfg}))
    assert not sweep.reusable(summary, "fedca-pmf-ml100k", ["fedca-rho=0.7"])


def test_authors_log_converter_and_valid_last_selection(tmp_path):
    log = tmp_path / "uf.log"
    log.write_text("noise\nROUND " + json.dumps({"round": 1, "test_hr": 0.1, "test_ndcg": 0.05, "val_hr": 0.2,
                                                 "val_ndcg": 0.1, "round_s": 30.0}) + "\n"
                   + "ROUND " + json.dumps({"round": 2, "test_hr": 0.3, "test_ndcg": 0.15, "val_hr": 0.2,
                                            "val_ndcg": 0.1, "round_s": 31.0}) + "\n")
    out = tmp_path / "ref.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "authors_log.py"), str(log), str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert [r["round"] for r in data["rounds"]] == [1, 2]
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compare_curves import reference, select

    curve = reference(out)
    sel = select(curve, [1, 2])
    assert sel["valid_selected"]["round"] == 1 and sel["valid_selected_last"]["round"] == 2   # ties


def test_compare_curves_takes_client_server_s_as_the_round_time_only_without_round_s(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compare_curves import reference

    row = {"round": 1, "test_hr": 0.1, "test_ndcg": 0.05, "val_hr": 0.2, "val_ndcg": 0.1}
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"rounds": [dict(row, client_server_s=42.0)]}))
    assert reference(ref)[1]["round_s"] == 42.0
    ref.write_text(json.dumps({"rounds": [dict(row, client_server_s=42.0, round_s=50.0)]}))
    assert reference(ref)[1]["round_s"] == 50.0
    ref.write_text(json.dumps({"rounds": [row]}))
    with pytest.raises(SystemExit, match="round_s"):
        reference(ref)


def test_seeds_table_mean_and_sample_std_by_hand(tmp_path):
    for seed, (hr, rounds) in enumerate([(0.70, 10), (0.72, 12), (0.74, 20)]):
        (tmp_path / f"m+seed={seed}.json").write_text(json.dumps({
            "status": "completed", "metrics": {"hr@10": hr, "ndcg@10": 0.1}, "rounds_completed": rounds,
            "wall_s": 30.0 * (seed + 1), "bytes_up": 2e6 * rounds, "bytes_down": 4e6 * rounds}))
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seeds_table.py"),
                        f"M={tmp_path}/m+seed=[0-9].json", f"none={tmp_path}/absent*.json"],
                       capture_output=True, text=True, check=True)
    rows = [r for r in p.stdout.splitlines() if r.startswith("| M |") or r.startswith("| none |")]
    # mean 0.72, sample std sqrt(((-.02)² + 0 + .02²) / 2) = 0.02; NDCG constant: std 0
    assert rows[0] == "| M | 3 | 0.7200 ± 0.0200 | 0.1000 ± 0.0000 | 10–20 | 60 | 2.0 / 4.0 |"
    assert rows[1].startswith("| none | 0 |")
    # seed 0 named without "+seed=0": two globs joined by '|', a file matched by both counted once
    (tmp_path / "m+seed=0.json").rename(tmp_path / "m.json")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seeds_table.py"),
                        f"M={tmp_path}/m.json|{tmp_path}/m+seed=[0-9].json|{tmp_path}/m*.json"],
                       capture_output=True, text=True, check=True)
    assert "| M | 3 | 0.7200 ± 0.0200 |" in p.stdout
    (tmp_path / "bad.json").write_text(json.dumps({"status": "failed"}))
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seeds_table.py"), f"B={tmp_path}/bad.json"],
                       capture_output=True, text=True)
    assert p.returncode != 0 and "not completed" in p.stderr


def test_golden_paths_counts_metric_differences_in_users_and_the_rest_as_inf():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from golden_paths import deviations

    line = {"metrics": {"mrr@10": 0.25, "hr@10": 0.5}, "bytes_up": 5,
            "metrics_paper_compat": {"metrics": {"mrr@10": 0.2}}, "rounds": [{"valid": {"hr@10": 0.1}}]}
    got = {"metrics": {"mrr@10": 0.26, "hr@10": 0.5}, "bytes_up": 5,
           "metrics_paper_compat": {"metrics": {"mrr@10": 0.23}}, "rounds": [{"valid": {"hr@10": 0.1}}]}
    # 100 users: |0.26 - 0.25| = 1 user's worth, |0.23 - 0.2| = 3 users' worth; equal values are not listed
    d = sorted(deviations(got, line, 100), reverse=True)
    assert [p for _, p in d] == ["/metrics_paper_compat/metrics/mrr@10", "/metrics/mrr@10"]
    assert [round(x, 9) for x, _ in d] == [3.0, 1.0]
    assert max(deviations({**got, "bytes_up": 6}, line, 100)) == (float("inf"), "/bytes_up")
    assert max(deviations({**got, "rounds": []}, line, 100)) == (float("inf"), "/rounds: length differs")


def test_graph_noise_agreement_is_one_without_noise_and_chance_with_much(tmp_path):
    """Three well-separated groups of W_u: a tiny ε keeps the clean graph, a large one gives a graph
    no closer to it than chance (independent graphs with the same row densities)."""
    import numpy as np

    g = np.random.default_rng(0)
    centres = g.standard_normal((3, 32 * 384))
    node = tmp_path / "run" / "node-state" / "n0"
    node.mkdir(parents=True)
    for c in range(60):
        w = centres[c % 3] + 0.01 * g.standard_normal(32 * 384)
        np.savez(node / f"c{c}.r5.npz", **{"user.weight": w.reshape(32, 384).astype(np.float32),
                                           "text": g.standard_normal(384).astype(np.float32)})
    (tmp_path / "run" / "config.json").write_text(json.dumps({"config": {
        "graph-mode": "reference", "neighborhood-size": 0, "neighborhood-threshold": 1.0}}))
    out = tmp_path / "noise.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ufgraphfr_graph_noise.py"), str(tmp_path / "run"),
                    "--eps", "0.0001,100", "--out", str(out)], check=True, capture_output=True, text=True)
    r = json.loads(out.read_text())
    assert r["round"] == 5 and r["clients"] == 60
    assert r["noisy"]["0.0001"]["agreement"] == 1.0
    assert r["noisy"]["0.0001"]["chance_agreement"] < 0.9
    assert abs(r["noisy"]["100.0"]["agreement"] - r["noisy"]["100.0"]["chance_agreement"]) < 0.05


def test_graph_noise_reads_the_authors_dump_with_the_codes_graph(tmp_path):
    """``--authors-dump``: the same numbers from the authors' patched code's wu.r<round>.npz (arrays
    w and text), with the code's threshold graph; a run folder and a dump together are refused."""
    g = np.random.default_rng(1)
    centres = g.standard_normal((3, 32 * 384))
    w = np.stack([centres[c % 3] + 0.01 * g.standard_normal(32 * 384) for c in range(45)]).astype(np.float32)
    dump = tmp_path / "wu.r7.npz"
    np.savez(dump, users=np.arange(45), w=w, text=g.standard_normal((45, 384)).astype(np.float32))
    out = tmp_path / "noise.json"
    script = str(ROOT / "benchmarks" / "ufgraphfr_graph_noise.py")
    subprocess.run([sys.executable, script, "--authors-dump", str(dump), "--eps", "0.0001,100", "--out", str(out)],
                   check=True, capture_output=True, text=True)
    r = json.loads(out.read_text())
    assert r["round"] == 7 and r["clients"] == 45 and r["graph-mode"] == "reference"
    assert r["noisy"]["0.0001"]["agreement"] == 1.0
    assert abs(r["noisy"]["100.0"]["agreement"] - r["noisy"]["100.0"]["chance_agreement"]) < 0.05
    both = subprocess.run([sys.executable, script, str(tmp_path), "--authors-dump", str(dump)],
                          capture_output=True, text=True)
    assert both.returncode != 0 and "one of them" in both.stderr


def test_authors_loo_check_maps_ids_and_counts_differences(tmp_path, data_dir):
    """The checker's mapping and counting, with a stand-in for the authors' interpreter that prints
    our own evaluation data in the authors' raw-id form (then one user's negative is changed)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import authors_loo_check as A

    from corolla.config import resolve
    from corolla.data import build_federation

    fed = build_federation(resolve("gpfedrec-ml100k"), data_dir, use_cache=False)
    theirs: dict = {}
    for split, neg in (("valid", fed.neg_valid), ("test", fed.neg_test)):
        ptr, idx = fed.indptr[split], fed.indices[split]
        theirs[split] = {str(int(fed.user_ids[u])): [int(idx[ptr[u]]) + 1] + [int(x) + 1 for x in neg[u]]
                         for u in range(fed.n_users)}
    fake = tmp_path / "python"

    def check(payload) -> dict:
        (tmp_path / "theirs.json").write_text(json.dumps(payload))
        fake.write_text(f"#!/bin/sh\ncat {tmp_path / 'theirs.json'}\n")
        fake.chmod(0o755)
        out = tmp_path / "report.json"
        assert A.main(["--authors-dir", str(tmp_path), "--authors-python", str(fake),
                       "--data-dir", str(data_dir), "--out", str(out)]) == 0
        return json.loads(out.read_text())

    rep = check(theirs)
    assert (rep["users"], rep["valid_items_differ"], rep["test_items_differ"],
            rep["valid_negatives_differ"], rep["test_negatives_differ"]) == (943, 0, 0, 0, 0)
    theirs["test"]["5"][3] = 0
    theirs["valid"]["9"][0] = 0
    rep = check(theirs)
    assert (rep["valid_items_differ"], rep["test_items_differ"], rep["test_negatives_differ"]) == (1, 0, 1)


def test_gpfedrec_engine_check_maps_every_parameter_and_refuses_a_wrong_checkout(tmp_path, capsys):
    """The authors' engine check (it needs their checkout, so it runs as a benchmark): its name map
    covers our GPFedRec model's parameters one to one, and a directory that is not a GPFedRec
    checkout is refused with the option named."""
    import pytest

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpfedrec_engine_check as E

    from corolla.models import ufgraphfr as UF

    ours = {k: tuple(v.shape) for k, v in UF.build("gpfedrec", 7).named_parameters()}
    assert sorted(E.A2C.values()) == sorted(ours) and len(set(E.A2C)) == len(ours)
    assert ours["item.weight"] == (7, E.CONFIG["latent_dim"]) and ours["fc.0.weight"] == (32, 2 * E.CONFIG["latent_dim"])
    with pytest.raises(SystemExit):
        E.main(["--authors-dir", str(tmp_path)])
    assert "--authors-dir" in capsys.readouterr().err
    import gpfedrec_authors_from_init as F

    with pytest.raises(SystemExit):
        F.main(["--authors-dir", str(tmp_path), "--init-seed", "3"])
    assert "--authors-dir" in capsys.readouterr().err


def test_lgcn_eigen_cost_covers_every_client(tmp_path, data_dir):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import lgcn_eigen_cost as L

    out = tmp_path / "eig.json"
    assert L.main(["--data-dir", str(data_dir), "--preset", "lpsfed-ml100k", "--set", "lgcn-phi=16",
                   "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    from corolla.config import resolve
    from corolla.data import build_federation

    sp = build_federation(resolve("lpsfed-ml100k"), data_dir).stats["spectral"]
    assert [c["edges"] for c in rep["clients"]] == list(sp["edges_per_client"])
    assert all(c["phi"] == 16 and c["eig_s"] > 0 and c["peak_rss_mb"] > 0 for c in rep["clients"])


def test_scale_sampler_reads_process_groups_and_the_tables_format(tmp_path):
    import subprocess as sp

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import scale

    child = sp.Popen([sys.executable, "-c", "import time; x = bytearray(60 << 20); time.sleep(30)"],
                     start_new_session=True)
    try:
        (tmp_path / "logs").mkdir()
        (tmp_path / "logs" / "pids.json").write_text(json.dumps({"superlink": child.pid, "supernodes": [child.pid]}))
        s = scale.Sampler(tmp_path, every=0.1)
        s.start()
        time.sleep(1.5)
        s.stop.set()
        s.join()
    finally:
        child.kill()
    assert s.node_max[0] >= 60 << 20 and s.node_sum[0] >= s.node_max[0] and s.link_rss == s.node_max[0]
    row = {"method": "pfedrec", "dataset": "gowalla", "users": 29857, "upload": "rows", "nodes": 2, "median_round_s": 130.2,
           "bytes_up_per_round": 6.5e8, "bytes_down_per_round": 1e7, "server_peak_rss_mb": 2180.0,
           "node_peak_mb_max_process": [1900, 1800], "node_peak_mb_group_sum": [2763, 2700], "state_on_disk_mb": 37.9,
           "metrics": {"hr@10": 0.3134}, "loadavg_before": 3.22, "loadavg_during": 3.02}
    table = scale.markdown_table("clients", {"rows": [row]}).splitlines()   # the report's table, as Markdown
    assert table[-1] == ("| pfedrec | gowalla | 29,857 | rows | 2 | 130.2 | 650.0 | 10.0 | 2,180 | 1,900 / 2,763 | "
                         "37.9 | 0.3134 | 3.22 / 3.02 |")
    assert table[1] == "|---|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---|"


def test_the_lpsfed_verdicts_are_regenerated_from_the_repository_exactly(tmp_path):
    """docs/results/lpsfed-verdict-{ml100k,gowalla}.json come from docs/results/ alone: the script's
    default inputs (benchmarks/lpsfed_verdict.py, REPOSITORY) give every number of the committed
    files, serialised identically; the committed command is that default one."""
    for dataset, name in (("ML-100K", "ml100k"), ("Gowalla", "gowalla")):
        committed = ROOT / "docs" / "results" / f"lpsfed-verdict-{name}.json"
        out, png = tmp_path / f"{name}.json", tmp_path / f"{name}.png"
        p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "lpsfed_verdict.py"), "--dataset", dataset,
                            "--json", str(out), "--plot", str(png)], capture_output=True, text=True, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        ours, theirs = json.loads(out.read_text()), json.loads(committed.read_text())
        assert theirs["command"] == (f"python benchmarks/lpsfed_verdict.py --dataset {dataset} --json "
                                     f"docs/results/lpsfed-verdict-{name}.json --plot docs/results/lpsfed-verdict-{name}.png")
        assert {k: v for k, v in ours.items() if k != "command"} == {k: v for k, v in theirs.items() if k != "command"}
        assert json.dumps({k: v for k, v in ours.items() if k != "command"}, indent=1) == \
            json.dumps({k: v for k, v in theirs.items() if k != "command"}, indent=1)
        assert "| LPSFed (authors' code) |" in p.stdout
    # a --corolla-json run without a curve is named, not guessed
    curves = tmp_path / "curves.json"
    curves.write_text(json.dumps({"curves": {}}))
    r = ROOT / "docs" / "results"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "lpsfed_verdict.py"), "--authors-json",
                        str(r / "lpsfed-authors-gowalla.json"), "--corolla-json", str(r / "lpsfed-code-gowalla.json"),
                        "--corolla-curves", str(curves), "--json", str(tmp_path / "x.json")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "no curve for run 'lpsfed-code-gowalla'" in p.stderr


def test_round_timeline_steps_by_hand_and_its_edits_still_match(tmp_path):
    """Two nodes' ClientApps (pids 11, 12) in each of 5 exchanges; every step is a known difference."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import round_timeline as rt

    ev = []
    for i in range(5):
        a = 10.0 * i
        ev += [(a, 1, "server encode"), (a + 0.1, 1, "server pushed")]
        for pid, late in ((100 + 2 * i, 0.0), (101 + 2 * i, 0.5)):
            ev += [(a + 0.2 + late, pid, "child start"), (a + 0.3 + late, pid, "pull_task_input end"),
                   (a + 0.5 + late, pid, "handle begin"), (a + 1.5 + late, pid, "handle end"),
                   (a + 1.6 + late, pid, "encoded"), (a + 1.7 + late, pid, "push_message begin"),
                   (a + 2.0 + late, pid, "push_message end")]
        ev += [(a + 2.1, 1, "server got reply"), (a + 2.9, 1, "server got reply")]
    per = rt.exchange_steps(ev, first=0)
    assert len(per) == 5
    e = per[0]
    assert e["push -> child forked"] == pytest.approx([0.1, 0.6])
    assert e["child: decode + compute (train + evaluate)"] == pytest.approx([1.0, 1.0])
    assert e["child: push reply to SuperNode"] == pytest.approx([0.3, 0.3])
    assert e["last reply pushed -> ServerApp has both replies"] == pytest.approx(2.9 - 2.5)
    assert e["round"] == pytest.approx(10.0)
    assert per[-1]["round"] == pytest.approx(2.9)   # the last exchange ends with its last reply
    med = rt.medians(ev)   # exchange 3 only: 3.. without the last
    assert med["round"] == 10.0 and med["child: FAB check + app load"] == 0.2
    cut = [e for e in ev if not (e[0] >= 40.0 and e[2] == "server got reply")]   # the last exchange unanswered
    assert len(rt.exchange_steps(cut, first=0)) == 4 and rt.medians(cut) == med   # exchange 3 still measured
    assert rt.instrumented_copy(tmp_path / "app").is_dir()   # every edit still matches the code once


def test_round_memory_stages_see_what_a_stage_allocates_and_what_it_keeps(tmp_path):
    """``benchmarks/round_memory.py``'s probe: a stage that allocates 40 MB and frees it shows a
    peak 40 MB above what it started with and keeps nothing; one that keeps 8 MB shows it held
    after; a generator stage (the transport's replies) lasts until it is consumed."""
    import tracemalloc

    import numpy as np

    sys.path.insert(0, str(ROOT))
    from benchmarks.round_memory import Probe

    p = Probe()
    kept = []

    def transient():
        a = np.ones(5_000_000)          # 40 MB
        return float(a[0])

    def keeps():
        kept.append(np.ones(1_000_000))  # 8 MB

    def replies():
        for _ in range(3):
            yield np.ones(2_500_000)    # 20 MB each, one at a time

    tracemalloc.start()
    try:
        p.round = 1
        p.stage("configure", transient)()
        p.stage("aggregate", keeps)()
        got = [float(x.sum()) for x in p.stream("exchange", replies)()]
    finally:
        tracemalloc.stop()
    t, k, x = p.rows
    assert [r["stage"] for r in p.rows] == ["configure", "aggregate", "exchange"] and got == [2.5e6] * 3
    assert 40 <= t["peak_mb"] - t["held_before_mb"] < 41 and abs(t["held_after_mb"] - t["held_before_mb"]) < 0.5
    assert 8 <= k["held_after_mb"] - k["held_before_mb"] < 8.5
    assert 20 <= x["peak_mb"] - x["held_before_mb"] < 41   # one reply alive at a time, not all three (60 MB)


def test_round_memory_names_a_bad_argument(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "round_memory.py"), "--data-dir",
                        str(tmp_path / "nowhere"), "--preset", "gpfedrec-lastfm2k"], capture_output=True, text=True)
    assert p.returncode == 2 and "--data-dir" in p.stderr and "no such directory" in p.stderr


def test_cuda_check_on_the_cpu_reproduces_a_golden_line_and_leaves_the_golden_module_as_it_was(data_dir):
    """``benchmarks/cuda_check.py`` on the CPU: the golden line exactly (no client excluded, same
    bytes, metrics equal); the device override does not leak into the golden module's overrides."""
    from benchmarks.cuda_check import _max_rel, check_one
    from tests import golden

    common = golden.COMMON
    got = check_one("perfedrec-pmf-filmtrust", data_dir, "cpu")
    assert golden.COMMON == common
    assert got["excluded"] == 0 and got["bytes_equal"] and got["metrics_equal"] and got["max_rel_metric_diff"] == 0.0, got
    assert _max_rel({"a": {"x": 1.1}}, {"a": {"x": 1.0}}) == pytest.approx(0.1)
    assert _max_rel({"a": None}, {"a": 0.5}) == float("inf")


def test_fedca_init_maps_the_codes_item_order_to_corollas_by_raw_id():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fedca_init

    # user 1 has 10 ratings > 0, user 2 only 9 (dropped), user 3 a zero rating that does not count
    users = np.array([1] * 10 + [2] * 9 + [3] * 11)
    items = np.array([50, 40, 50, 30, 60, 41, 42, 43, 44, 45] + [99] * 9 + [70, 40] + list(range(80, 89)))
    ratings = np.array([1.0] * 19 + [0.0] + [2.0] * 10)
    order = fedca_init.code_item_order(users, items, ratings)
    # first appearances among the kept ratings: user 1's, then user 3's (its rating-0 item 70 dropped)
    assert order.tolist() == [50, 40, 30, 60, 41, 42, 43, 44, 45] + list(range(80, 89))
    corolla_ids = np.sort(order)                      # Corolla: kept raw ids ascending
    perm = fedca_init.permutation(order, corolla_ids)
    assert (corolla_ids[perm] == order).all()
    table = np.arange(len(order))[:, None] * np.ones((1, 2))   # code row j holds j
    ours = np.empty_like(table)
    ours[perm] = table
    assert ours[np.searchsorted(corolla_ids, 30)][0] == 2     # raw 30 is the code's item 2
    with pytest.raises(SystemExit, match="differ"):
        fedca_init.permutation(order, np.sort(np.r_[order[:-1], 999]))


def test_fedca_init_groups_from_both_dump_formats(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fedca_init

    ours = tmp_path / "ranks.jsonl"
    ours.write_text("\n".join(json.dumps(d) for d in [
        {"users": [0, 1, 2], "test_item": [7, 7, 5], "hit": [0.0, 1.0, 0.0]},   # round 1, training replies
        {"users": [0], "test_item": [7], "hit": [1.0]},                           # its aggregated client amends it
        {"users": [0, 1, 2], "test_item": [7, 7, 5], "hit": [0.0, 0.0, 1.0]}]) + "\n")
    res = fedca_init.rounds_from_dump(ours)
    assert sorted(res) == [1, 2]
    assert fedca_init.group_split(res[1]) == (7, 2, 1.0, 0.0, pytest.approx(2 / 3))
    assert fedca_init.group_split(res[2]) == (7, 2, 0.0, 1.0, pytest.approx(1 / 3))
    theirs = tmp_path / "dump"
    theirs.mkdir()
    (theirs / "ranks-r10.json").write_text(json.dumps({"round": 10, "test_item": [3, 3, 3, 4], "hits": {"1": 2, "3": 9}}))
    res = fedca_init.rounds_from_dump(theirs)
    assert fedca_init.group_split(res[10]) == (3, 3, pytest.approx(1 / 3), 1.0, 0.5)


def test_fedca_init_groups_split_ndcg_where_the_dump_has_it(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fedca_init

    ours = tmp_path / "ranks.jsonl"
    ours.write_text("\n".join(json.dumps(d) for d in [
        {"users": [0, 1, 2, 3], "test_item": [7, 7, 5, 4], "hit": [1.0, 1.0, 1.0, 0.0], "ndcg": [1.0, 0.5, 0.25, 0.0]},
        {"users": [1], "test_item": [7], "hit": [0.0], "ndcg": [0.0]}]) + "\n")   # an amending line
    res = fedca_init.rounds_from_dump(ours)
    assert fedca_init.group_split(res[1], "ndcg") == (7, 2, 0.5, 0.125, 0.3125)
    assert fedca_init.groups(argparse.Namespace(dump=str(ours), csv=str(tmp_path / "g.csv"))) == 0
    row = capsys.readouterr().out.splitlines()[-1].split(" | ")
    # round, item: users, then HR all / holders / others / all with the holders missing, the same for NDCG
    assert (tmp_path / "g.csv").read_text().splitlines()[1].split(",")[2:] == [
        "0.5000", "0.5000", "0.5000", "0.2500", "0.3125", "0.5000", "0.1250", "0.0625"]
    assert row[1:] == ["item 7: 2", "0.5000", "0.5000", "0.5000", "0.2500", "0.3125", "0.5000", "0.1250", "0.0625 |"]


def test_fedatt_attention_stats_are_the_weights_fedatt_applies():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fedatt_attention
    from corolla import composite

    server = np.zeros((3, 2))
    clients = np.stack([np.full((3, 2), v) for v in (0.5, 1.0, 3.0)])   # distances sqrt(6)·(0.5, 1, 3)
    st = fedatt_attention.attention_stats(server, clients)
    s = np.sqrt(6) * np.array([0.5, 1.0, 3.0])
    att = np.exp(s) / np.exp(s).sum()                                   # by hand: softmax of the raw distances
    assert st["argmax"] == 2 and st["max_att"] == pytest.approx(att[2])
    assert st["effective_clients"] == pytest.approx(1 / np.sum(att ** 2))
    assert st["dist_gap_top2"] == pytest.approx(s[2] - s[1]) and st["dist_median"] == pytest.approx(s[1])
    # with ε = 1 and no noise FedAtt's new tensor is the attention-weighted mean of the uploads
    new = composite.fedatt(server, clients, 1.0, 2, 0.0)
    assert np.allclose(new, np.tensordot(att, clients, axes=1), atol=1e-6)
    lin = fedatt_attention.attention_stats(server, clients, weights="distance")
    assert lin["max_att"] == pytest.approx(3 / 4.5) and lin["effective_clients"] == pytest.approx(1 / np.sum((s / s.sum()) ** 2))
    spec = fedatt_attention.attention_stats(server, clients, norm="matrix")   # constant tables: rank 1, σ = Frobenius
    assert spec["max_att"] == pytest.approx(att[2])
    skew = np.stack([np.diag([3.0, 4.0, 0.0])[:, :2], np.diag([3.0, 0.0, 0.0])[:, :2]])   # σ_max 4 and 3, Frobenius 5 and 3
    assert fedatt_attention.attention_stats(np.zeros((3, 2)), skew, norm="matrix")["dist_max"] == pytest.approx(4.0)
    assert fedatt_attention.attention_stats(np.zeros((3, 2)), skew)["dist_max"] == pytest.approx(4.0)   # the default: matrix
    assert fedatt_attention.attention_stats(np.zeros((3, 2)), skew, norm="flattened")["dist_max"] == pytest.approx(5.0)
    one = fedatt_attention.attention_stats(server, clients[:1])
    assert one["max_att"] == 1.0 and one["effective_clients"] == 1.0 and one["dist_gap_top2"] == 0.0
    with pytest.raises(SystemExit, match="FedAtt preset"):
        fedatt_attention.main(["--out", "x.json", "--", "--preset", "fedavg-pmf-filmtrust", "--mode", "inproc"])


def test_inproc_args_need_a_preset_and_the_in_process_mode():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from inproc_args import corolla_run_args

    rest, preset = corolla_run_args(["--", "--preset", "p", "--mode", "inproc", "--nodes", "1"], "why")
    assert preset == "p" and rest[0] == "--preset"
    with pytest.raises(SystemExit, match="--preset P"):
        corolla_run_args(["--mode", "inproc", "--preset"], "why")
    with pytest.raises(SystemExit, match=r"--mode inproc \(why\)"):
        corolla_run_args(["--preset", "p", "--mode", "local"], "why")


def test_state_cache_benchmark_runs_both_ways_with_equal_metrics(tmp_path, data_dir):
    """benchmarks/state_cache.py: one run without the cache and one with it, on a small one-user
    preset; the metrics of every round are equal and the JSON names both."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import state_cache

    out = tmp_path / "sc.json"
    state_cache.main(["--out", str(out), "--repeats", "1", "--budget-mb", "64", "--", "--preset", "fedavg-pmf-filmtrust",
                      "--set", "num-rounds=2", "--set", "min-user-interactions=150", "--mode", "inproc", "--nodes", "1",
                      "--data-dir", data_dir])
    doc = json.loads(out.read_text())
    assert [r["cache_mb"] for r in doc["runs"]] == [0, 64] and doc["all_metrics_equal"]
    assert all(len(r["round_wall_s"]) == 2 and r["user_s"] > 0 for r in doc["runs"])
    with pytest.raises(SystemExit, match="without --out"):
        state_cache.main(["--out", str(out), "--", "--preset", "p", "--out", "x"])


def test_round_curves_reads_dotted_series_keeps_every_kth_and_names_a_missing_series(tmp_path):
    d = tmp_path / "runs" / "pfedgraph+pfedgraph-alpha=0.1"
    d.mkdir(parents=True)
    recs = [{"round": r, "wall_s": 2.0 * r, "train": {"self-weight": 1.0 / r, "clients": 3},
             **({"compat": {"hr@10": 0.1 * r}} if r != 2 else {})} for r in (3, 1, 2, 4)]
    (d / "rounds.jsonl").write_text("\n".join(json.dumps(x) for x in recs) + "\n")
    (d / "summary.json").write_text(json.dumps({"rounds_completed": 4, "provenance": {"command": (
        f"{sys.executable} -m launcher.cli run --preset pfedgraph-pmf-ml100k --data-dir /data/sets "
        f"--out {d} --set pfedgraph-alpha=0.1")}}))
    out = tmp_path / "curves.json"
    script = str(ROOT / "benchmarks" / "round_curves.py")
    res = subprocess.run([sys.executable, script, "--series", "train.self-weight,compat.hr@10,wall_s",
                          "--what", "a test", "--out", str(out), f"a={d}"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    run = json.loads(out.read_text())["runs"]["a"]
    assert run["command"] == ("corolla run --preset pfedgraph-pmf-ml100k --data-dir $COROLLA_DATA "
                              "--out runs/pfedgraph+pfedgraph-alpha=0.1 --set pfedgraph-alpha=0.1")
    assert [r["round"] for r in run["curve"]] == [1, 2, 3, 4]                    # sorted by round
    assert run["curve"][1] == {"round": 2, "train.self-weight": 0.5, "wall_s": 4.0}   # round 2: no compat
    assert run["curve"][2]["compat.hr@10"] == pytest.approx(0.3)
    res = subprocess.run([sys.executable, script, "--series", "train.self-weight", "--every", "3",
                          "--what", "a test", "--out", str(out), f"a={d}"], capture_output=True, text=True)
    assert [r["round"] for r in json.loads(out.read_text())["runs"]["a"]["curve"]] == [3, 4]   # 3rd and last
    res = subprocess.run([sys.executable, script, "--series", "train.nothing", "--what", "x",
                          "--out", str(tmp_path / "no.json"), f"a={d}"], capture_output=True, text=True)
    assert res.returncode != 0 and "train.nothing" in res.stderr and str(d) in res.stderr
    assert not (tmp_path / "no.json").exists()


def test_result_record_makes_the_command_portable_sets_the_note_and_refuses_bad_input(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import result_record
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    run = tmp_path / "scratch" / "runs" / "gga-mf-ml100k-943+patience=0"
    run.mkdir(parents=True)
    summary = {"status": "completed", "metrics": {"f1@10": 0.1}, "provenance": {"command": (
        f"{sys.executable} -m launcher.cli run --preset gga-mf-ml100k-943 --mode inproc --nodes 8 "
        f"--data-dir /data/sets --out {run} --set patience=0 --set 'lr=0.1 x'")}}
    (run / "summary.json").write_text(json.dumps(summary))
    dst = tmp_path / "results" / "a.json"
    doc = result_record.record_summary(summary, dst, "why it ran")
    assert summary["provenance"]["command"].startswith(sys.executable)          # input untouched
    want = ("corolla run --preset gga-mf-ml100k-943 --mode inproc --nodes 8 --data-dir $COROLLA_DATA "
            "--out runs/gga-mf-ml100k-943+patience=0 --set patience=0 --set 'lr=0.1 x'")
    assert doc["provenance"] == {"command": want, "note": "why it ran"}
    text = dst.read_text()
    assert json.loads(text) == doc and text == json.dumps(doc, indent=1, sort_keys=True)
    assert result_record.portable("/v/bin/corolla run --resume /scratch/runs_gp/runs/gp-1 --mode inproc"
                                  "  # resumed after round 40") == (
        "corolla run --resume runs/gp-1 --mode inproc  # resumed after round 40")
    # a " # " inside a quoted value is the value's, not a comment; "#" inside a word neither
    assert result_record.portable("corolla run --preset p --set 'note=a # b' --set \"x=#2\" --set y=c#d  # why") == (
        "corolla run --preset p --set 'note=a # b' --set 'x=#2' --set 'y=c#d'  # why")
    # a benchmark script that wraps the run keeps its own command, its dump file by name
    assert result_record.portable("benchmarks/fedca_init.py run --dump-ranks /w/r/x.jsonl -- --preset p --mode inproc "
                                  "--nodes 1 --data-dir /d --out /w/runs/x-s1") == (
        "python benchmarks/fedca_init.py run --dump-ranks x.jsonl -- --preset p --mode inproc --nodes 1 "
        "--data-dir $COROLLA_DATA --out runs/x-s1")
    assert result_record.split_comment("a 'b # c'") == ("a 'b # c'", "")
    assert result_record.split_comment('a "b \\" # c" d\\ #e  # f') == ('a "b \\" # c" d\\ #e', "  # f")
    with pytest.raises(ValueError, match="--note is empty"):
        result_record.record_summary(summary, dst, "  ")
    with pytest.raises(ValueError, match="no provenance"):
        result_record.record_summary({"metrics": {}}, dst)
    # the command line: a run folder goes to <results>/<folder name>.json; a result file in place
    results = tmp_path / "results"
    result_record.main(["--results", str(results), str(run)])
    rec = json.loads((results / f"{run.name}.json").read_text())
    assert rec["provenance"] == {"command": want}
    result_record.main(["--note", "later", str(results / f"{run.name}.json")])
    assert json.loads((results / f"{run.name}.json").read_text())["provenance"]["note"] == "later"
    with pytest.raises(SystemExit, match="summary.json"):
        result_record.main(["--results", str(results), str(tmp_path)])
    with pytest.raises(SystemExit, match="run folder or an existing .json"):
        result_record.main([str(tmp_path / "nothing.json")])


def test_sweep_refuses_a_note_without_record_and_an_empty_note():
    script = str(ROOT / "benchmarks" / "sweep.py")
    for extra, msg in ((["--note", "x"], "give --record"), (["--record", "--note", " "], "--note is empty")):
        res = subprocess.run([sys.executable, script, "--data-dir", "/nowhere", *extra, "fedavg-mf-ml100k"],
                             capture_output=True, text=True)
        assert res.returncode == 2 and msg in res.stderr


def test_ufgraphfr_authors_lastfm_data_writes_table_3_and_the_authors_user_file(tmp_path, data_dir):
    """ratings.dat: UFGraphFR's Table 3 rows in HetRec's order with the dates; user.dat: the
    authors' published file (the script refuses any other git blob)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import ufgraphfr_authors_lastfm_data as L

    L.main(["--data-dir", str(data_dir), "--out", str(tmp_path / "lastfm-2k")])
    rows = (tmp_path / "lastfm-2k" / "ratings.dat").read_text().splitlines()
    assert len(rows) == 185650 and rows[0] == "2,52,1,20090401"
    users = {r.split(",")[0] for r in rows}
    items = {r.split(",")[1] for r in rows}
    assert (len(users), len(items)) == (1600, 12454)
    dat = (tmp_path / "lastfm-2k" / "user.dat").read_bytes()
    assert len(dat) == 10344 and dat.startswith(b"0,10\n1,9\n2,57\n")
    assert not list((tmp_path / "lastfm-2k").glob("*.tmp"))


_FEDCIA_LOG = """\
2026-12-06 01:15:00,000 - Base_MLP - INFO - Use device: cpu
2026-12-06 01:15:03,530 - Base_MLP - INFO - Finish valid valid set epoch 0 in 3.53s, f1: [0.005], mrr: [0.0128], ndcg: [0.0214].
2026-12-06 01:15:06,950 - Base_MLP - INFO - Finish valid valid set epoch 1 in 3.42s, f1: [0.006], mrr: [0.0132], ndcg: [0.0217].
2026-12-06 01:15:10,510 - Base_MLP - INFO - Finish valid valid set epoch 2 in 3.56s, f1: [0.006], mrr: [0.0140], ndcg: [0.0220].
2026-12-06 01:15:10,600 - Base_MLP - INFO - early stop at epoch 2
2026-12-06 01:15:12,000 - Base_MLP - INFO - f1: [0.0112], mrr: [0.0748], ndcg: [0.1074].
"""


def test_fedcia_authors_log_reads_the_first_best_valid_round_and_the_final_test(tmp_path):
    log, ini, out = tmp_path / "output.log", tmp_path / "c.ini", tmp_path / "r.json"
    log.write_text(_FEDCIA_LOG)
    ini.write_text("[exp]\nname = Base_MLP\nrandom_seed = 42\n[dataset]\nclient_num = 943\n")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fedcia_authors_log.py"), str(log), str(ini),
                        str(out), "--command", "python -m entry.base --config=c.ini"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    d = json.loads(out.read_text())
    assert d["metrics"] == {"f1@10": 0.0112, "mrr@10": 0.0748, "ndcg@10": 0.1074}
    assert d["selected_round"] == 2                      # rounds 2 and 3 tie: the stopper's strict '>'
    assert [r["round"] for r in d["rounds"]] == [1, 2, 3] and d["rounds"][2]["round_s"] == 3.56
    assert d["stopped_early"] and d["config"]["dataset"]["client_num"] == "943"
    from corolla.report.sources import read_result
    assert read_result(out, "authors", ["f1@10"]).metrics["mrr@10"] == 0.0748


def test_fedcia_authors_log_refuses_an_unfinished_run(tmp_path):
    log, ini = tmp_path / "output.log", tmp_path / "c.ini"
    log.write_text(_FEDCIA_LOG.rsplit("\n", 2)[0] + "\n")          # no final test line
    ini.write_text("[exp]\nname = x\n")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fedcia_authors_log.py"), str(log), str(ini),
                        str(tmp_path / "r.json"), "--command", "x"], capture_output=True, text=True)
    assert p.returncode != 0 and "found 0" in p.stderr and not (tmp_path / "r.json").exists()


def test_fedcia_authors_log_reads_a_one_shot_gfcf_run(tmp_path):
    log, ini, out = tmp_path / "output.log", tmp_path / "c.ini", tmp_path / "r.json"
    log.write_text("x - Fedgsp - INFO - Use device: cpu\n1\n2\n"
                   "x - Fedgsp - INFO - f1: [0.15], mrr: [0.25], ndcg: [0.33].\n"
                   "x - Fedgsp - INFO - f1: [0.2354], mrr: [0.5808], ndcg: [0.6701].\n")
    ini.write_text("[exp]\nname = Fedgsp\n")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fedcia_authors_log.py"), str(log), str(ini),
                        str(out), "--command", "x"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    d = json.loads(out.read_text())
    assert d["one_shot"] and d["rounds"] == [] and d["valid"]["f1@10"] == 0.15
    assert d["metrics"] == {"f1@10": 0.2354, "mrr@10": 0.5808, "ndcg@10": 0.6701}


def test_random_ranking_draw_is_a_uniform_top_k_of_the_unmasked_items():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from random_ranking import one_draw
    from tests.test_oneuser_fullrank import tiny_federation

    fed = tiny_federation()                        # 15 items; each user 4 train, 2 valid, 2 test (user 3: none)
    users = [u for u in range(fed.n_users) if len(fed.rows("test", u))]
    # top 3 of 15 - 4 train - 2 valid = 9 candidates holding 2 test items: E[hits] = 3 * 2 / 9
    runs = [one_draw(fed, "test", [3], True, True, np.random.default_rng(s)) for s in range(1500)]
    assert np.mean([r["precision@3"] for r in runs]) == pytest.approx(2 / 9, abs=0.01)
    assert np.mean([r["hr@3"] for r in runs]) == pytest.approx(1 - (7 * 6 * 5) / (9 * 8 * 7), abs=0.02)
    assert all(r["compat:f1@3"] > 0 for r in runs[:5]) and len(users) == fed.n_users - 1
    with_valid = [one_draw(fed, "test", [3], False, False, np.random.default_rng(s)) for s in range(1500)]
    assert np.mean([r["precision@3"] for r in with_valid]) == pytest.approx(2 / 11, abs=0.01)   # valid unmasked


def test_fedcia_init_exports_each_clients_own_draws_and_the_wrapper_writes_them_over_the_codes(tmp_path, data_dir):
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fedcia_authors_from_init
    import fedcia_init

    from client_app.mf import FedAvgClient
    from corolla.config import resolve
    from corolla.data import build_federation

    cfg = resolve("fedavg-mf-ml100k-943", {"seed": 7, "dim": 4})
    fed = build_federation(cfg, data_dir)
    out = tmp_path / "init.npz"
    assert fedcia_init.main(["--data-dir", data_dir, "--seed", "7", str(out)]) == 0
    z = np.load(out)
    assert z["user"].shape == (943, 256) and z["item"].shape == (1682, 256)
    assert z["offsets"][-1] == len(z["pos"]) == fed.count("train", np.arange(943)) == 72000
    st = fedcia_init.initial_state(cfg, fed)       # d = 4 here: the same draws' logic, small
    for cid in (0, 5, 942):
        own = FedAvgClient(cfg, fed, cid, fed.clients[cid], "cpu").init_state()
        a, b = st["offsets"][cid], st["offsets"][cid + 1]
        assert (st["pos"][a:b] == own["samples/pos"]).all() and (st["neg"][a:b] == own["samples/neg"]).all()
        assert (st["user"][cid] == own["user.weight"][0]).all() and (st["item"] == own["item.weight"]).all()
        train = set(fed.rows("train", cid).tolist())
        assert set(st["pos"][a:b].tolist()) <= train and not set(st["neg"][a:b].tolist()) & train

    # the code's objects, as far as the wrapper touches them: a server item table, per-client user
    # vectors and datasets holding S (user, pos, neg) and trainnum
    class Obj:
        pass

    fake = Obj()
    fake.client_num = 3
    fake.server_model = Obj()
    fake.server_model.embedding_item = torch.nn.Embedding(1682, 4)
    fake.client_model, fake.dataset_list = [], []
    for cid in range(3):
        m = Obj()
        m.embedding_user = torch.nn.Embedding(1, 4)
        fake.client_model.append(m)
        d = Obj()
        d.trainnum = int(st["offsets"][cid + 1] - st["offsets"][cid])
        fake.dataset_list.append(d)
    three = {**st, "user": st["user"][:3], "offsets": st["offsets"][:4]}
    fedcia_authors_from_init.overwrite(fake, three)
    assert torch.equal(fake.server_model.embedding_item.weight.detach(), torch.from_numpy(st["item"]))
    assert torch.equal(fake.client_model[2].embedding_user.weight.detach()[0], torch.from_numpy(st["user"][2]))
    a, b = st["offsets"][1], st["offsets"][2]
    assert fake.dataset_list[1].S.tolist() == [[0, p, n] for p, n in zip(st["pos"][a:b], st["neg"][a:b])]
    fake.dataset_list[0].trainnum += 1
    with pytest.raises(SystemExit, match="client 0 has"):
        fedcia_authors_from_init.overwrite(fake, three)
    with pytest.raises(SystemExit, match="client_num = 3"):
        fedcia_authors_from_init.overwrite(fake, st)
