"""MetaMF (Lin et al., SIGIR'20; the authors' code TempSDU/MetaMF bbfdf0b) as a unit: the model
against golden tensors of the authors' ``MetaMF.py`` (``benchmarks/authors_golden.py metamf``), the
federated server step (clients return gradients w.r.t. what they received, the server
back-propagates them through the generator) against a centralised step on the same rows, a short
in-process run on 1 and 3 nodes, the declaration's checks and the server's payload checks."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from client_app.metamf import client_gradients
from corolla import methods
from corolla.config import resolve
from corolla.keys import ConfigError
from corolla.models.metamf import MetaMF as Network
from corolla.models.metamf import code_state_dict, rp_predict
from corolla.protocol import PayloadError
from corolla.round import Phase
from strategies.base import ClientResult
from strategies.metamf import MetaMF

GOLDEN = Path(__file__).parent / "data" / "metamf_golden.npz"
PREFIX = "metarecommender."
PRESET = "metamf-ufgraphfr-ml100k"


# ---------------------------------------------------------------- (a) the authors' code
def golden_network():
    g = np.load(GOLDEN)
    d, k, ud, mem, hid = (int(x) for x in g["sizes"])   # item_emb_size, item_mem_num, user_emb_size, mem_size, hidden
    net = Network(5, 7, d, k, ud, mem, hid)
    net.load_state_dict({n[len("before/" + PREFIX):]: torch.as_tensor(g[n]) for n in g.files
                         if n.startswith("before/")})
    return g, net


def test_forward_loss_gradients_and_one_adam_step_equal_the_authors_code():
    """The authors' ``MetaMF`` (small widths: d = 8, k = 3, user 6, memory 10, hidden 12) on 5 users ×
    7 items, one batch of 6 rows, ``MetaMF.loss`` (MSE), ``clip_grad_norm_(·, 5)`` and one Adam(1e-4,
    weight decay 1e-3) step (Run.ipynb cells 15, 17), from the same parameters.

    Tolerance 1e-6 absolute on the predictions, the loss, every gradient and every parameter after
    the step. Both sides are float32 with the same operations except the item selection: the code
    multiplies a one-hot matrix by the whole generated table, Corolla gathers the row and generates
    only the used rows of L_u (``MetaMF.item_rows``), so the sums run in another order; that moves
    results by float32 rounding (observed ≤ 1.2e-7 on gradients of magnitude ≤ 1.8, i.e. about one
    ulp, and 2e-10 on the parameters after the step). 1e-6 is ~8 ulp of the largest value and 1 % of
    the Adam step (lr 1e-4, which the test checks the parameters moved by), so a wrong term, a
    missing weight decay or clip, or a wrong row would fail it."""
    g, net = golden_network()
    assert set(code_state_dict(net)) == {n[len("before/"):] for n in g.files if n.startswith("before/")}
    u, i, r = (torch.as_tensor(g[k]) for k in ("users", "items", "ratings"))
    pred = net(u, i)
    loss = ((pred - r) ** 2).mean()
    np.testing.assert_allclose(pred.detach().numpy(), g["pred"], atol=1e-6)
    assert abs(loss.item() - float(g["loss"])) < 1e-6
    loss.backward()
    for n, p in net.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), g[f"grad/{PREFIX}{n}"], atol=1e-6, err_msg=n)
    opt = torch.optim.Adam(net.parameters(), lr=1e-4, weight_decay=1e-3)
    torch.nn.utils.clip_grad_norm_(net.parameters(), 5)
    opt.step()
    moved = 0.0
    for n, p in net.named_parameters():
        np.testing.assert_allclose(p.detach().numpy(), g[f"after/{PREFIX}{n}"], atol=1e-6, err_msg=n)
        moved = max(moved, float(np.abs(g[f"after/{PREFIX}{n}"] - g[f"before/{PREFIX}{n}"]).max()))
    assert 0.9e-4 < moved < 1.1e-4   # Adam's first step: lr per entry


def test_generated_parameters_give_the_forward():
    """What the server sends (``generate``: Q_u, W₀, b₀, W₁, b₁) scored by the client's RP module
    (``rp_predict``) is the model's forward, and ``item_rows`` equals the rows of the full Q_u."""
    g, net = golden_network()
    u, i = torch.as_tensor(g["users"]), torch.as_tensor(g["items"])
    with torch.no_grad():
        gen = net.generate(u)
        rows = net.item_rows(u, i)
        q = gen["item.weight"][torch.arange(len(u)), i]
        np.testing.assert_allclose(rows.numpy(), q.numpy(), atol=1e-6)
        for j in range(len(u)):
            y = rp_predict(q[j:j + 1], gen["rp.w0"][j], gen["rp.b0"][j], gen["rp.w1"][j], gen["rp.b1"][j])
            assert abs(float(y[0]) - float(g["pred"][j])) < 1e-6


def test_the_initialisation_is_the_codes():
    """Xavier-normal weights (std √(2/(fan_in + fan_out))) and memory, zero biases, N(0, 1) user
    embeddings; seeded."""
    net = Network(300, 40, 32, 8, 32, 128, 512)
    net.init(3)
    again = Network(300, 40, 32, 8, 32, 128, 512)
    again.init(3)
    for (n, p), q in zip(net.named_parameters(), again.parameters()):
        assert torch.equal(p, q), n
        if n.endswith("bias"):
            assert not p.any(), n
        elif n == "user_embedding.weight":
            assert abs(float(p.detach().std()) - 1.0) < 0.02
        else:
            want = np.sqrt(2.0 / (p.shape[0] + p.shape[1]))
            assert abs(float(p.detach().std()) / want - 1.0) < 0.05, n


# ---------------------------------------------------------------- (b) federated step = centralised step
class _Roster:
    def __init__(self, n_items, cids):
        self.n_items = n_items
        self.clients = {c: {"users": 1, "train": 3, "node": 0} for c in cids}
        self.data_stats = {}

    def available(self):
        return sorted(self.clients)


SMALL = {"dim": 8, "metamf-rank": 3, "metamf-user-dim": 6, "metamf-memory": 10, "metamf-hidden": 12, "lr": 1e-2}
CIDS = [3, 5, 6, 9]        # logical client ids (not contiguous: the server maps them to embedding rows)
ITEMS = {3: [0, 4, 4, 7], 5: [2, 1], 6: [8, 0, 3, 5, 6], 9: [1]}       # rows of each client (repeats allowed)
LABELS = {3: [1, 0, 1, 0], 5: [1, 0], 6: [1, 1, 0, 0, 0], 9: [1]}


def strategy(over=None):
    s = MetaMF(resolve(PRESET, {**SMALL, **(over or {})}))
    s.roster = _Roster(9, CIDS)
    s.setup()
    return s


def federated_round(s, rnd, loss):
    down = s.configure_phase(Phase.TRAIN, rnd, CIDS)
    assert not down.shared and set(down.personal) == set(CIDS)
    results = {}
    for c in CIDS:
        ell, ids, grow, grp = client_gradients(down.personal[c], np.array(ITEMS[c]), np.array(LABELS[c], np.float32),
                                               loss)
        pay = {"grad.item@rows": ids.astype(np.int32), "grad.item@vals": grow,
               **{f"grad.{k}": v for k, v in grp.items()}}
        res = s.accept(Phase.TRAIN, rnd, c, ClientResult(pay, {"num-examples": len(ITEMS[c]), "train-loss": ell}))
        results[c] = res
    return s.aggregate_phase(Phase.TRAIN, rnd, results)


def central_step(net, opt, loss, weighting, clip):
    """The code's step (Run.ipynb cell 17) on one mini-batch holding every client's rows: the mean
    over all rows ('examples'), or the mean over clients of each client's mean ('uniform')."""
    opt.zero_grad()
    users = torch.as_tensor([CIDS.index(c) for c in CIDS for _ in ITEMS[c]])
    items = torch.as_tensor([i for c in CIDS for i in ITEMS[c]])
    y = torch.as_tensor([v for c in CIDS for v in LABELS[c]], dtype=torch.float32)
    pred = net(users, items)
    per = (pred - y) ** 2 if loss == "mse" else torch.nn.functional.binary_cross_entropy_with_logits(
        pred, y, reduction="none")
    if weighting == "examples":
        total = per.mean()
    else:
        sizes = [len(ITEMS[c]) for c in CIDS]
        total = torch.stack([part.mean() for part in torch.split(per, sizes)]).mean()
    total.backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
    opt.step()


CASES = [("mse", "examples", 5.0), ("mse", "examples", 0.0), ("bce", "examples", 0.5), ("mse", "uniform", 5.0)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("loss,weighting,clip", CASES)
def test_the_federated_step_equals_the_centralised_step(loss, weighting, clip, dtype):
    """Every client sampled, each returning ∂ℓ_u/∂(Q_u rows, W₀, b₀, W₁, b₁) at the parameters it
    received; the server's back-propagation through the generator, clip and Adam step equal the
    code's step on one mini-batch of all the rows (weighting 'examples'; 'uniform': the mean of the
    clients' means), for three rounds (Adam's state carried).

    float64 (lr 1e-2): within 1e-10, the same function (observed ≤ 5e-15). float32 (the code's lr
    1e-4): within 1e-6, 1 % of an Adam step. The two gradients are summed in other orders (per client
    through Q_u = L_u R_u, per row through the generated row); Adam divides by √v̂ + 1e-8, so an entry
    whose gradient is near 1e-8 turns a rounding difference δg into lr·δg/1e-8 (observed 5e-6 at
    lr 1e-2 with clip 5, 5e-8 at 1e-4): the float32 bound scales with lr, not with the gradient."""
    over = {"metamf-loss": loss, "metamf-weighting": weighting, "metamf-clip": clip}
    if dtype == "float32":
        over["lr"] = 1e-4
    s = strategy(over)
    if dtype == "float64":
        s.net.double()   # in place: the optimiser keeps the same parameters (no state yet)
    tol = 1e-10 if dtype == "float64" else 1e-6
    net = copy.deepcopy(s.net)
    opt = torch.optim.Adam(net.parameters(), lr=s.cfg["lr"], weight_decay=s.p.metamf_weight_decay)
    start = {n: p.detach().clone() for n, p in net.named_parameters()}
    for rnd in (1, 2, 3):
        out = federated_round(s, rnd, loss)
        central_step(net, opt, loss, weighting, clip)
        assert out["clients"] == len(CIDS)
        if clip > 0 and rnd == 1:
            assert out["grad-norm"] > clip   # the clip acts
        for (n, p), q in zip(s.net.named_parameters(), net.parameters()):
            assert p.dtype == getattr(torch, dtype)
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), atol=tol, err_msg=f"round {rnd}: {n}")
    moved = max(float((p.detach() - start[n]).abs().max()) for n, p in s.net.named_parameters())
    assert moved > 2 * s.cfg["lr"]   # three steps of about lr each


def test_the_checkpoint_restores_the_network_and_adam():
    """state_dict → load_state_dict → setup gives a server whose next round equals the original's."""
    a = strategy()
    federated_round(a, 1, "mse")
    b = MetaMF(resolve(PRESET, SMALL))
    b.roster = _Roster(9, CIDS)
    b.load_state_dict({k: v.copy() for k, v in a.state_dict().items()})
    b.setup()
    federated_round(a, 2, "mse")
    federated_round(b, 2, "mse")
    for (n, p), q in zip(a.net.named_parameters(), b.net.parameters()):
        assert torch.equal(p, q), n


def test_the_server_refuses_bad_row_ids():
    s = strategy()
    down = s.configure_phase(Phase.TRAIN, 1, [3])
    _, ids, grow, grp = client_gradients(down.personal[3], np.array(ITEMS[3]), np.array(LABELS[3], np.float32), "mse")
    base = {f"grad.{k}": v for k, v in grp.items()}
    for rows, why in ((ids[::-1], "sorted"), (np.array([0, 4, 9]), r"\[0, 9\)"), (ids[:2], "row ids for")):
        pay = {"grad.item@rows": rows.astype(np.int32), "grad.item@vals": grow, **base}
        with pytest.raises(PayloadError, match=f"grad.item@rows.*{why}"):
            s.accept(Phase.TRAIN, 1, 3, ClientResult(pay, {"num-examples": 4}))
    spec = s.expected_payload(Phase.TRAIN, 3)
    assert spec["grad.rp.w0"].shape == (8, 2) and spec["grad.item@vals"].shape == (-1, 8)


def test_a_client_that_joined_later_is_named():
    s = strategy()
    with pytest.raises(ValueError, match=r"clients \[42\]"):
        s.configure_phase(Phase.TRAIN, 1, [3, 42])


# ---------------------------------------------------------------- (c) a short run, 1 and 3 nodes
def test_a_short_run_gives_the_same_numbers_on_one_and_three_nodes(tmp_path, data_dir):
    """2 rounds on 40 users (small widths): the metrics, the bytes, every round's training loss and
    gradient norm, and the server's network after the run are the same on 1 and 3 in-process nodes;
    the clients keep nothing."""
    from server_app.app import run_federation
    from tests.inproc import InProcessTransport, partitions

    small = ("num-rounds=2 max-users=40 metamf-hidden=16 metamf-memory=8 metamf-user-dim=8 lr=0.01 "
             "metamf-rows-per-round=30")
    out, rounds, nets = {}, {}, {}
    for n in (1, 3):
        t = InProcessTransport(partitions(n, {"data-dir": data_dir}))
        out[n] = run_federation(t, {"preset": PRESET, "set": small, "out-dir": str(tmp_path / str(n)),
                                    "data-dir": data_dir})
        rounds[n] = [json.loads(x)["train"] for x in (tmp_path / str(n) / "rounds.jsonl").read_text().splitlines()]
        nets[n] = dict(np.load(tmp_path / str(n) / "checkpoint.npz"))
    assert out[1]["metrics"] == out[3]["metrics"] and out[1]["rounds_completed"] == 2
    assert out[1]["bytes_up"] == out[3]["bytes_up"] and out[1]["bytes_down"] == out[3]["bytes_down"]
    assert len(rounds[1]) == 2 and rounds[1] == rounds[3]
    assert all(r["clients"] == 40 and np.isfinite(r["train-loss"]) for r in rounds[1])
    assert nets[1].keys() == nets[3].keys()
    server = [k for k in nets[1] if k.startswith(("net/", "adam/"))]   # the strategy's state (not __meta__)
    assert len(server) > 20
    for k in server:
        np.testing.assert_array_equal(nets[1][k], nets[3][k], err_msg=k)
    states = list((tmp_path / "1").rglob("c*.r*.npz"))
    assert states and all(not np.load(p).files for p in states)


# ---------------------------------------------------------------- (d) the declaration
def test_declaration_keys_and_checks():
    m = methods.find("metamf", "one-user", "metamf")
    assert m.requires == {"optimizer": "adam"} and not m.row_upload
    p = methods.run_params(resolve(PRESET))
    assert (p.metamf_user_dim, p.metamf_memory, p.metamf_hidden, p.metamf_rank) == (32, 128, 512, 8)
    assert methods.protocol("metamf")


@pytest.mark.parametrize("key,value", [("metamf-rank", 0), ("metamf-hidden", 0), ("metamf-memory", -1),
                                       ("metamf-user-dim", 0), ("metamf-clip", -1.0),
                                       ("metamf-weight-decay", -0.1), ("metamf-rows-per-round", -3),
                                       ("metamf-loss", "hinge"), ("metamf-weighting", "nodes"), ("dim", 2),
                                       ("optimizer", "sgd"), ("item-upload", "rows"), ("model", "mf")])
def test_bad_values_name_their_key(key, value):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        resolve(PRESET, {key: value})


def test_a_client_that_joined_after_setup_is_left_out_not_the_run_ended():
    """The meta network has a user-embedding row per client known at setup: a client of a node
    that joined later is left out of sampling and evaluation (a warning), the run goes on."""
    s = strategy()
    late = max(CIDS) + 1
    assert s.sample(1, list(CIDS) + [late]) == s.sample(1, list(CIDS))
    assert late not in s._known(list(CIDS) + [late], "a test")
