"""MetaMF's server (Lin et al., SIGIR'20, Fig. 1; TempSDU/MetaMF bbfdf0b; docs/methods/metamf.md): the meta
network and every user's embedding live here (``corolla.models.metamf``).

Round t (federated SGD, one server step per round):

* ``configure_phase``: for each sampled client u, Q_u, W₀, b₀, W₁, b₁ generated from its embedding
  (no gradient kept: a query) and sent to u alone;
* the client returns ∂ℓ_u/∂Q_u on the rows it used (``grad.item@rows`` ids, ``grad.item@vals``) and
  ∂ℓ_u/∂(W₀, b₀, W₁, b₁), ℓ_u being the mean loss over its n_u rows;
* ``aggregate_phase``: the returned clients' parameters are generated again with gradients, in
  client-id order and chunks, and ``backward`` is called with their gradients weighted by
  n_u / Σ n (``metamf-weighting = examples``: the gradient of the mean loss over all the round's
  rows, as one mini-batch of the code holding them all) or 1 / |S|; then the global-norm clip and
  one Adam step with weight decay, as the code's step (Run.ipynb cells 15, 17).

Evaluation: the generation after round t's step for every evaluated client, with round t+1's first
message (the client ranks its candidates with its generated model). The checkpoint holds the
network, the Adam state and the client-to-embedding-row map.
"""

from __future__ import annotations

from logging import INFO, WARNING
from typing import Any

import numpy as np
import torch
from flwr.common.logger import log

from corolla.models.metamf import GENERATED, MetaMF as Network
from corolla.protocol import ArraySpec, PayloadError, row_keys
from corolla.round import DEFAULT_CONTROL, Download, Phase
from corolla.util import stable_seed
from strategies.base import ClientResult, CorollaStrategy

CHUNK = 64          # clients generated together (memory: CHUNK × items × d floats)
GRAD_ROWS = row_keys("grad.item")


def grad_key(name: str) -> str:
    return f"grad.{name}"


class MetaMF(CorollaStrategy):
    counted_phases = ("train",)

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.net: Network | None = None
        self.opt: torch.optim.Adam | None = None
        self.rows: dict[int, int] = {}      # logical client id -> row of the user embedding
        self._restored: dict[str, np.ndarray] | None = None   # a checkpoint, applied in setup()

    # ------------------------------------------------------------------ state
    def build(self, cids: list[int]) -> None:
        p = self.p
        self.rows = {c: j for j, c in enumerate(sorted(cids))}
        self.net = Network(len(self.rows), self.n_items, self.cfg["dim"], p.metamf_rank, p.metamf_user_dim,
                           p.metamf_memory, p.metamf_hidden)
        self.net.init(stable_seed(self.cfg["seed"], "metamf-init"))
        self.opt = torch.optim.Adam(self.net.parameters(), lr=self.cfg["lr"], weight_decay=p.metamf_weight_decay)

    def setup(self) -> None:
        if self._restored is not None:
            self._restore(self._restored)
            self._restored = None
        elif self.net is None:
            self.build(list(self.clients))

    def _users(self, cids: list[int]) -> torch.Tensor:
        missing = [c for c in cids if c not in self.rows]
        if missing:
            raise ValueError(f"MetaMF: clients {missing[:5]} joined after the first handshake; the user "
                             "embedding table has a row for each client known then")
        return torch.as_tensor([self.rows[c] for c in cids])

    @torch.no_grad()
    def generated(self, cids: list[int]) -> dict[int, dict[str, np.ndarray]]:
        """Each client's private parameters, generated now (a query: no state changes)."""
        out: dict[int, dict[str, np.ndarray]] = {}
        for a in range(0, len(cids), CHUNK):
            part = cids[a:a + CHUNK]
            g = self.net.generate(self._users(part))
            for j, c in enumerate(part):
                out[c] = {"item.weight": g["item.weight"][j].numpy(), "rp.w0": g["rp.w0"][j].numpy(),
                          "rp.b0": g["rp.b0"][j].numpy(), "rp.w1": g["rp.w1"][j].numpy(),
                          "rp.b1": g["rp.b1"][j].numpy()}
        return out

    # ------------------------------------------------------------------ round
    def _known(self, cids, what: str) -> list[int]:
        """``cids`` that have a row of the user-embedding table; a client that joined after the
        first handshake has none (the meta network's size is fixed at setup), so it is left out
        with a warning instead of ending the run."""
        known = [c for c in cids if self.net is None or c in self.rows]
        if len(known) < len(cids):
            late = sorted(set(cids) - set(known))
            log(WARNING, "MetaMF: clients %s joined after the first handshake and have no user embedding; "
                "left out of %s", late[:5], what)
        return known

    def sample(self, rnd, available):
        return super().sample(rnd, self._known(list(available), f"round {rnd}'s training"))

    def eval_targets(self, rnd, replied):
        return self._known(super().eval_targets(rnd, replied), f"round {rnd}'s evaluation")

    def configure_phase(self, phase, rnd, targets):
        return Download({}, self.generated(list(targets)))

    def expected_payload(self, phase, cid, control=DEFAULT_CONTROL):
        d, h, m = self.cfg["dim"], self.net.rp_hidden, self.n_items
        rk, vk = GRAD_ROWS
        return {rk: ArraySpec((-1,), "int32", max_shape=(m,)), vk: ArraySpec((-1, d), "float32", max_shape=(m, d)),
                grad_key("rp.w0"): ArraySpec((d, h)), grad_key("rp.b0"): ArraySpec((h,)),
                grad_key("rp.w1"): ArraySpec((h,)), grad_key("rp.b1"): ArraySpec((1,))}

    def accept(self, phase, rnd, cid, result: ClientResult) -> ClientResult:
        if phase != Phase.TRAIN:
            return super().accept(phase, rnd, cid, result)
        rk, vk = GRAD_ROWS
        rows, vals = result.payload[rk], result.payload[vk]
        if len(rows) != len(vals):
            raise PayloadError(f"'{rk}': {len(rows)} row ids for {len(vals)} rows of gradients")
        if len(rows) and (rows[0] < 0 or rows[-1] >= self.n_items or (len(rows) > 1 and (np.diff(rows) <= 0).any())):
            raise PayloadError(f"'{rk}': expected sorted distinct item ids in [0, {self.n_items})")
        return super().accept(phase, rnd, cid, result)

    def aggregate_phase(self, phase, rnd, results: dict[int, ClientResult]):
        cids = sorted(c for c in results if c in self.rows)
        if not cids:
            log(INFO, "round %d: no valid gradient; the meta network is unchanged", rnd)
            return {}
        w = np.array([float(results[c].metrics["num-examples"]) for c in cids])
        if self.p.metamf_weighting == "uniform" or w.sum() <= 0:
            w = np.ones(len(cids))
        w = w / w.sum()
        self.opt.zero_grad(set_to_none=True)
        for a in range(0, len(cids), CHUNK):
            self.backward_chunk(cids[a:a + CHUNK], results, w[a:a + CHUNK])
        params = [p for p in self.net.parameters() if p.grad is not None]
        norm = float(torch.nn.utils.clip_grad_norm_(params, self.p.metamf_clip)) if self.p.metamf_clip > 0 else \
            float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))
        self.opt.step()
        losses = [results[c].metrics.get("train-loss", float("nan")) for c in cids]
        return {"train-loss": float(np.nanmean(losses)) if np.isfinite(losses).any() else float("nan"),
                "clients": len(cids), "grad-norm": norm}

    def backward_chunk(self, cids: list[int], results: dict[int, ClientResult], w: np.ndarray) -> None:
        """Accumulate Σ_u w_u ∂ℓ_u/∂θ for the clients ``cids`` (their parameters generated again)."""
        g = self.net.generate(self._users(cids))
        rk, vk = GRAD_ROWS
        item = torch.zeros_like(g["item.weight"])
        outs = {k: torch.zeros_like(g[k]) for k in GENERATED if k != "item.weight"}
        for j, c in enumerate(cids):
            pay = results[c].payload
            rows = torch.as_tensor(pay[rk].astype(np.int64))
            item[j, rows] = torch.as_tensor(pay[vk]) * float(w[j])
            for k in outs:
                outs[k][j] = torch.as_tensor(pay[grad_key(k)]).reshape(outs[k][j].shape) * float(w[j])
        torch.autograd.backward([g["item.weight"]] + [g[k] for k in outs], [item] + list(outs.values()))

    def evaluate_download(self, rnd, targets):
        return Download({}, self.generated(list(targets)))

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self):
        out = {f"net/{k}": v.detach().numpy().copy() for k, v in self.net.state_dict().items()}
        out["clients"] = np.array(sorted(self.rows), np.int64)
        for i, st in self.opt.state_dict()["state"].items():
            for k, v in st.items():
                out[f"adam/{i}/{k}"] = torch.as_tensor(v).detach().numpy().copy()
        return out

    def load_state_dict(self, state):
        """Kept until :meth:`setup` (the roster's item count is known after the handshake)."""
        self._restored = dict(state)

    def _restore(self, state):
        self.build([int(c) for c in state["clients"]])
        self.net.load_state_dict({k[4:]: torch.as_tensor(v) for k, v in state.items() if k.startswith("net/")})
        sd = self.opt.state_dict()
        st: dict[int, dict[str, torch.Tensor]] = {}
        for k, v in state.items():
            if k.startswith("adam/"):
                _, i, name = k.split("/", 2)
                st.setdefault(int(i), {})[name] = torch.as_tensor(v)
        sd["state"] = st
        self.opt.load_state_dict(sd)
