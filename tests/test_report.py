"""``corolla report``: the leaderboards of the papers' tables (``corolla/report/paper_tables.toml``), the
Markdown overview, and the site as a person sees it in a real browser (headless Chromium)."""

import json
import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from corolla.keys import ConfigError
from corolla.report.board import anchor, build, status_of
from corolla.report.make import make, run_page
from corolla.report.render import markdown

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "corolla" / "report" / "paper_tables.toml"
RESULTS = ROOT / "docs" / "results"


def test_status_boundaries():
    assert status_of(0.05, 0.05, 0.2) == "reproduced" and status_of(-0.049, 0.05, 0.2) == "reproduced"
    assert status_of(0.051, 0.05, 0.2) == "level only" and status_of(-0.2, 0.05, 0.2) == "level only"
    assert status_of(0.21, 0.05, 0.2) == "not reproduced" and status_of(None, 0.05, 0.2) == "not run"


def test_every_paper_row_has_a_row_with_a_status_and_a_reason():
    boards = build(CATALOGUE, RESULTS)
    rows = [r for b in boards for r in b.rows]
    assert len(rows) == 303   # 5 papers' headline tables, every (method, dataset) cell
    assert {b.paper for b in boards} == {"FedCIA", "FedCA", "LPSFed", "Dist-FedAvg", "UFGraphFR"}
    assert all(r.reason for r in rows)
    fedca = next(r for b in boards if b.id == "fedca-t1-pmf-ml-100k" for r in b.rows if r.method == "FedCA")
    assert fedca.ours and fedca.authors and fedca.status == "reproduced"
    lps = next(r for b in boards if b.id == "lpsfed-t1-gowalla" for r in b.rows if r.method == "LPSFed")
    assert lps.status == "not reproduced"
    md = markdown(boards)
    for b in boards:
        for r in b.rows:
            assert f"| {r.method} |" in md


def test_an_authors_log_reads_the_best_validation_round_latest_of_ties(tmp_path):
    """UFGraphFR's, GPFedRec's and PFedRec's train.py report the test metrics of the round with the
    best validation HR, `>=` (the latest of ties) -- not the best test round."""
    from corolla.report.sources import read_result

    rounds = [{"round": 1, "test_hr": 0.50, "test_ndcg": 0.30, "val_hr": 0.40},
              {"round": 2, "test_hr": 0.70, "test_ndcg": 0.40, "val_hr": 0.55},   # best test HR
              {"round": 3, "test_hr": 0.60, "test_ndcg": 0.35, "val_hr": 0.60},
              {"round": 4, "test_hr": 0.62, "test_ndcg": 0.36, "val_hr": 0.60}]   # tie: the later wins
    f = tmp_path / "x-authors.json"
    f.write_text(json.dumps({"rounds": rounds}))
    assert read_result(f, "authors", ["hr@10", "ndcg@10"]).metrics == {"hr@10": 0.62, "ndcg@10": 0.36}
    f.write_text(json.dumps({"rounds": [{"round": 1, "test_hr": 0.5, "test_ndcg": 0.3}]}))
    with pytest.raises(ConfigError, match="val_hr"):
        read_result(f, "authors", ["hr@10", "ndcg@10"])


def test_a_missing_result_file_is_named(tmp_path):
    bad = tmp_path / "t.toml"
    text = CATALOGUE.read_text()
    assert '"fedca-pmf-ml100k.json"' in text
    bad.write_text(text.replace('"fedca-pmf-ml100k.json"', '"nope-*.json"', 1))
    with pytest.raises(ConfigError, match="nope"):
        build(bad, RESULTS)


def test_inputs_default_to_a_checkout_and_are_named_when_missing(tmp_path, monkeypatch):
    from launcher.cli import main

    monkeypatch.chdir(tmp_path)   # no docs/results here: the flag to give is named
    with pytest.raises(ConfigError, match="give --results DIR"):
        make([], tmp_path / "site")
    assert main(["report", "--results", str(tmp_path / "nope")]) == 2
    with pytest.raises(ConfigError, match="--results-md"):
        make([], tmp_path / "site", results_dir=RESULTS, results_md=tmp_path / "nope.md")
    # a results folder alone (as beside an installed package): the site names the sections, links none
    res = tmp_path / "mine" / "results"
    shutil.copytree(RESULTS, res)
    out = tmp_path / "site"
    assert main(["report", "--results", str(res), "--out", str(out)]) == 0
    index = (out / "index.html").read_text()
    assert "results.md#" not in index and len(json.loads((out / "rows.json").read_text())) == 303
    assert "In depth:" not in (out / "methods" / "fedca.html").read_text()
    # from a checkout's root the defaults are docs/results, docs/results.md, docs/methods, docs/site
    monkeypatch.chdir(ROOT)
    out2 = tmp_path / "site2"
    make([], out2)
    assert "../../" in (out2 / "index.html").read_text() and "results.md#" in (out2 / "index.html").read_text()
    assert "fedca.md" in (out2 / "methods" / "fedca.html").read_text()


def _browser():
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        if os.environ.get("CI"):
            pytest.fail("chromium and chromedriver are missing: .ci/run installs them (apt-get install chromium "
                        "chromium-driver)")
        pytest.skip("no chromium/chromedriver (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    o = webdriver.ChromeOptions()
    o.binary_location = chromium
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--window-size=1400,1800"):
        o.add_argument(a)
    return webdriver.Chrome(service=Service(driver), options=o)


def _check_page(d, path: Path, results_anchors: set[str]) -> None:
    d.get(path.as_uri())
    assert d.title, path
    imgs = d.execute_script("return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, "
                            "i.naturalWidth])")
    assert all(ok and w > 0 for _, ok, w in imgs), f"{path}: images that did not load: {imgs}"
    links = d.execute_script("return Array.from(document.links).map(a => a.href)")
    for href in links:
        u = urlparse(href)
        assert u.scheme == "file", f"{path}: link {href} leaves the site"
        target = Path(unquote(u.path))
        assert target.exists(), f"{path}: broken link {href}"
        if u.fragment and target.name == "results.md":
            assert unquote(u.fragment) in results_anchors, f"{path}: no section #{u.fragment} in docs/results.md"


def test_site_in_a_real_browser(tmp_path, data_dir):
    from launcher.inproc import InProcessTransport, partitions
    from server_app.app import run_federation

    run = tmp_path / "fedavg-run"
    run_federation(InProcessTransport(partitions(2, {"data-dir": data_dir})),
                   {"preset": "fedavg-mf-ml100k", "out-dir": str(run), "data-dir": data_dir,
                    "set": "num-rounds=3 split=loo partition=blocks num-clients=4 protocol=loo dim=8 loss=bpr "
                           "train-samples=per-positive compat-fedcia-metrics=false select-metric=ndcg@10 patience=0"})
    out = tmp_path / "site"
    res = make([str(run)], out, tmp_path / "leaderboard.md", results_dir=RESULTS)
    rows = json.loads((out / "rows.json").read_text())
    assert len(rows) == res["rows"] == 303
    anchors = {anchor(line.lstrip("#").strip()) for line in (ROOT / "docs" / "results.md").read_text().splitlines()
               if line.startswith("#")}
    d = _browser()
    try:
        shots = Path(os.environ.get("COROLLA_SCREENS", tmp_path / "screens"))
        shots.mkdir(parents=True, exist_ok=True)
        _check_page(d, out / "index.html", anchors)
        on_page = set(map(tuple, d.execute_script(
            "return Array.from(document.querySelectorAll('tr.row')).map(r => [r.dataset.board, r.dataset.method])")))
        missing = [r for r in rows if (r["board"], r["method"]) not in on_page]
        assert not missing and len(on_page) == len(rows), f"rows not on the overview: {missing[:5]}"
        d.save_screenshot(str(shots / "overview.png"))
        _check_page(d, out / "methods" / "fedca.html", anchors)
        assert d.find_elements("css selector", "img"), "the FedCA page shows no plot"
        d.save_screenshot(str(shots / "method-fedca.png"))
        _check_page(d, out / "trust.html", anchors)
        assert d.find_elements("css selector", "img"), "the security page shows no secure-aggregation plot"
        tables = d.find_elements("css selector", "table")
        assert len(tables) >= 4, "the security page lacks a table (secure aggregation, churn, hostile node)"
        d.save_screenshot(str(shots / "trust.png"))
        _check_page(d, out / "scale.html", anchors)
        if (ROOT / "docs" / "results" / "scale-clients.json").is_file():
            assert d.find_elements("css selector", "img"), "the scale page shows no plot"
            assert d.find_elements("css selector", "table"), "the scale page shows no table"
        d.save_screenshot(str(shots / "scale.png"))
        for page in [*(out / "methods").glob("*.html"), *(out / "runs").glob("*.html")]:
            _check_page(d, page, anchors)
        _check_page(d, out / "runs" / "fedavg-run.html", anchors)
        assert d.find_elements("css selector", "img"), "the run page shows no learning curve"
    finally:
        d.quit()
    assert run_page(run).is_file()


def test_trust_page_shows_every_recorded_row_and_names_a_bad_file(tmp_path):
    from corolla.report import trust

    res = ROOT / "docs" / "results"
    body = trust.page(res, tmp_path)
    cost = json.loads((res / "secagg-cost.json").read_text())["rows"]
    churn = json.loads((res / "churn.json").read_text())
    hostile = json.loads((res / "hostile-node.json").read_text())
    # one table row per recorded secure-aggregation row, churn round and hostile exclusion (+ headers)
    assert body.count("<tr>") == (len(cost) + 1) + (len(churn["table"]) + 1) + (len(hostile["exclusions"]) + 1) + \
        (len(set(hostile["metrics_all_honest"]) & set(hostile["metrics_with_hostile_node"])) + 1)
    assert (tmp_path / "img" / "secagg-cost.png").stat().st_size > 1000
    for r in cost:   # the measured distance and its bound, as recorded
        assert f"{r['max_abs_diff']:.2e} ≤ {r['bound']:.2e}" in body
    flat = trust.secagg_rows({"rows": cost})
    assert all(r["diff"] <= r["bound"] for r in flat)
    # every row shows the summed phase's seconds, plain and secure (FedAvg 'train', GF-CF 'upload')
    assert {r["summed_phase"] for r in flat} == {"train", "upload"}
    assert all(r["sum_plain_s"] is not None and r["sum_secure_s"] is not None for r in flat)
    # absent files are said to be absent; a file of the wrong shape is named with what it lacks
    empty = tmp_path / "empty"
    empty.mkdir()
    assert body.count("Not recorded") == 0 and trust.page(empty, tmp_path).count("Not recorded") == 3
    (empty / "churn.json").write_text(json.dumps({"table": []}))
    with pytest.raises(ConfigError, match=r"churn.json: no 'metrics'"):
        trust.page(empty, tmp_path)


def _scale_results(d: Path) -> dict:
    """Result files of benchmarks/scale.py and ray_cluster.py in the shapes they write."""
    d.mkdir()
    run = {"median_round_s": 5.0, "command_s": 30.0, "bytes_up_per_round": 2e7, "bytes_down_per_round": 2e5,
           "server_peak_rss_mb": 400.0, "node_peak_mb_max_process": [380, 370], "node_peak_mb_group_sum": [900, 880],
           "state_on_disk_mb": 1.0, "superlink_cpu_s": 4.0, "superlink_peak_rss_mb": 250,
           "metrics": {"hr@10": 0.5, "ndcg@10": 0.3}, "loadavg_before": 0.5, "loadavg_during": 2.0}
    clients = [dict(run, method=m, dataset="gowalla", users=u, upload=up, nodes=2)
               for m in ("fedavg-pmf", "pfedrec") for u in (943, 29857) for up in ("full", "rows")]
    fedca = [dict(run, method="fedca", users=943, upload="full", nodes=2, aggregated=94, blocks=b, **{"fedca-block": k},
                  server_aggregation_s=[1.0, 1.1]) for k, b in ((0, 1), (64, 2))]
    nodes = [dict(run, nodes=n) for n in (1, 2, 4)]
    compose = [dict(run, compose=True, nodes=16, supernode_containers=16, supernode_containers_peak_mb_sum=4000,
                    superlink_peak_mb=300, superlink_cpu_percent_mean=12.5)]
    files = {"clients": clients, "fedca": fedca, "nodes": nodes, "compose": compose}
    for k, rows in files.items():
        (d / f"scale-{k}.json").write_text(json.dumps({"command": f"python benchmarks/scale.py {k}", "rows": rows}))
    single = {"command": "corolla run", "metrics": {"ndcg@10": 0.3}, "actors_per_netns": {"(host)": 2}}
    (d / "ray-cluster.json").write_text(json.dumps({
        "preset": "fedavg-mf-ml100k", "virtual_nodes": 4, "rounds": 2, "round_metrics_equal": True,
        "single_machine": single, "cluster": dict(single, actors_per_netns={"rayhead": 1, "raywork": 1})}))
    return files


def test_scale_page_shows_every_recorded_row_and_names_a_bad_file(tmp_path):
    from corolla.report import scale

    files = _scale_results(tmp_path / "res")
    body = scale.page(tmp_path / "res", tmp_path)
    assert body.count("<tr>") == sum(len(rows) + 1 for rows in files.values()) and "Not recorded" not in body
    assert (tmp_path / "img" / "scale.png").stat().st_size > 1000
    assert "Every round's metrics equal: <b>yes</b>" in body and "raywork" in body
    assert "+0.0000" in body   # FedCA in blocks against the exact run of the same users
    empty = tmp_path / "empty"
    empty.mkdir()
    assert scale.page(empty, tmp_path).count("Not recorded") == 5
    (empty / "scale-nodes.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ConfigError, match=r"scale-nodes.json: no 'command'"):
        scale.page(empty, tmp_path)
    # the files in docs/results, when recorded, are read the same way
    res = ROOT / "docs" / "results"
    real = scale.page(res, tmp_path)
    for k, name in scale.FILES.items():
        if (res / name).is_file() and k != "ray":
            assert len(json.loads((res / name).read_text())["rows"]) > 0 and "Not recorded: no " + name not in real


def test_each_board_links_to_its_own_datasets_section():
    """Boards of one table that have results link to different sections of docs/results.md (each its
    dataset's); the section on the data this machine does not have is linked, and only by boards
    with no result."""
    from corolla.report.board import check_sections

    boards = build(CATALOGUE, RESULTS)
    check_sections(boards, ROOT / "docs" / "results.md")
    by_table: dict[str, dict[str, str]] = {}
    for b in boards:
        if any(r.ours for r in b.rows):
            by_table.setdefault(b.title, {})[b.dataset] = b.section
    for title, secs in by_table.items():
        assert len(set(secs.values())) == len(secs), f"{title}: datasets share a section: {secs}"
    absent = [b for b in boards if b.section == "Datasets not on this machine"]
    assert absent and not [b.id for b in absent if any(r.ours for r in b.rows)]


def _one_table(tmp_path, extra: str) -> Path:
    """A catalogue of one table with one row that ran (FedCA's PMF ML-100K result) and one that did not."""
    cat = tmp_path / "t.toml"
    cat.write_text('[[table]]\nid = "t"\npaper = "FedCA"\ntitle = "T"\nprotocol = "p"\nmetrics = ["hr@10", "ndcg@10"]\n'
                   'section = "s"\ndatasets = ["ML-100K"]\n'
                   'values = """\nFedCA | 0.30 0.20\nLocal | 0.30 0.20\n"""\n'
                   '[table.ours]\n"FedCA|ML-100K" = ["fedca-pmf-ml100k.json"]\n' + extra)
    return cat


def test_a_long_note_needs_its_one_line_verdict_and_stays_as_evidence(tmp_path):
    long_note = "in part located: " + "a measured detail, " * 15
    long_reason = "not run: " + "the measured cost per round, " * 10
    notes = f'[table.notes]\n"FedCA|ML-100K" = "{long_note}"\n[table.reasons]\n"Local" = "{long_reason}"\n'
    with pytest.raises(ConfigError, match=r"FedCA\|ML-100K.*longer than 200|longer than 200.*FedCA\|ML-100K"):
        build(_one_table(tmp_path, notes), RESULTS)
    ok = notes + ('[table.verdicts]\n"FedCA|ML-100K" = "in part located: a measured detail"\n'
                  '"Local" = "not run: the measured cost"\n')
    (board,) = build(_one_table(tmp_path, ok), RESULTS)
    fedca, local = board.rows
    assert fedca.status == "not reproduced"   # 0.30 / 0.20 in the paper: far below the run
    assert fedca.reason.endswith("; in part located: a measured detail") and long_note not in fedca.reason
    assert fedca.evidence == long_note
    assert local.reason == "not run: the measured cost" and local.evidence == long_reason
    md = markdown([board])
    table_part, _, evidence_part = md.partition("The evidence behind the one-line reasons:")
    assert long_note not in table_part and f"- **FedCA**: {long_note}" in evidence_part
    assert f"- **Local**: {long_reason}" in evidence_part
    from corolla.report.render import _board_html
    assert "<details><summary>evidence</summary>in part located: a measured detail" in _board_html(board, None, "")


@pytest.mark.parametrize("verdicts, match", [
    ('"FedCA|ML-100K" = "' + "x" * 161 + '"', "at most 160 characters"),
    ('"FedCA|ML-100K" = "two\\nlines"', "at most 160 characters"),
    ('"Local|ML-100K" = "a verdict for nothing"', "no note or reason"),
])
def test_a_bad_verdict_is_named(tmp_path, verdicts, match):
    cat = _one_table(tmp_path, '[table.notes]\n"FedCA|ML-100K" = "short"\n[table.verdicts]\n' + verdicts + "\n")
    with pytest.raises(ConfigError, match=match):
        build(cat, RESULTS)


def test_every_reason_of_the_leaderboard_is_one_line():
    """The catalogue's long notes print as their verdicts; the reason column stays short."""
    boards = build(CATALOGUE, RESULTS)
    for b in boards:
        for r in b.rows:
            assert len(r.reason) <= 320, f"{b.id} {r.method}: reason of {len(r.reason)} characters"
