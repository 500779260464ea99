"""LPSFed clients (ICLR'26; paper §3.1–3.3, Alg. 1–2; docs/methods/lpsfed.md) and FedAvg-LGCN.

A logical client is one spectral subgraph (silo): its users, its items (``item_owner``) and the
training edges between them. Its model is ``corolla.models.lgcn.LGCN``.

Phases:

* ``stats`` (once, with statistics on): uploads (n_users, n_items, n_edges, mean degree) of its
  subgraph (paper §3.2, App. D.3); nothing else about the graph leaves;
* ``train``: loads the personalised pooling/predictive MLPs θ_c and the margin M_c^upd the
  server sent (from round 2), trains ``local-epochs`` epochs (batches of ``batch-size`` training
  edges, one uniform negative from its items not in the user's training list, RMSprop with
  ``lpsfed-weight-decay``; the first ``lpsfed-freeze-epochs`` local epochs of the run train the
  bias encoders on L_bias alone, later ones the model on the BC loss with the encoders frozen,
  paper Eq. 7–9, App. D.6), then computes K_c = k_last ⊙ λ (Eq. 6) and ρ_c = KL(K_R ‖ K_c) (Eq. 11) against the
  reference kernel K_R it received, and M_c = the mean margin over the last epoch's positives
  (Eq. 10), and uploads θ_c, ρ_c and M_c. Evaluation (full ranking over the client's own items)
  uses this post-training model, in the same message.

The spectral basis (P, λ) is computed once per client and cached on the node
(``$COROLLA_CACHE/lgcn/``); the metric ``eig-s`` reports its one-time cost.
"""

from __future__ import annotations

import hashlib
import json
import math
import resource
import time
from pathlib import Path

import numpy as np
import torch

from client_app.base import LogicalClient, PhaseResult
from corolla import metrics as M
from corolla.data.federation import data_key
from corolla.data.sources import default_cache
from corolla.models import lgcn as L
from corolla.util import atomic_save_npz, load_npz, rng, stable_seed


def kernel_similarity(k_ref: np.ndarray, k_client: np.ndarray, mode: str, eps: float = 1e-10) -> float:
    """ρ_c = KL(K_R ‖ K_c) (Eq. 11): ``distribution`` — both as normalised |K| over the Φ
    components, ε-smoothed (the paper's reading of Eq. 11, App. B Eq. 43–45); ``code-exact`` — the code's 1-bin
    histogram density of each (1/(max − min), 1 when the range is 0), |p log(p/q)|."""
    if mode == "code-exact":
        def dens(x):
            r = float(np.max(x) - np.min(x))
            return 1.0 / r if r > 0 else 1.0
        p, q = dens(k_ref) + eps, dens(k_client) + eps
        return float(abs(p * math.log(p / q)))
    p = np.abs(np.asarray(k_ref, np.float64))
    q = np.abs(np.asarray(k_client, np.float64))
    p = p / p.sum() if p.sum() > 0 else np.full_like(p, 1.0 / len(p))
    q = q / q.sum() if q.sum() > 0 else np.full_like(q, 1.0 / len(q))
    return float(np.sum((p + eps) * np.log((p + eps) / (q + eps))))


class LPSFedClient(LogicalClient):
    """A spectral-subgraph client (``model = lgcn``; method ``lpsfed`` or ``fedavg``)."""

    def __init__(self, cfg, fed, cid, users, device, data_dir=None, params=None):
        super().__init__(cfg, fed, cid, users, device, data_dir, params)
        if fed.item_owner is None:
            raise ValueError("model 'lgcn' needs partition='spectral' (each client's items are its own)")
        self.items = np.flatnonzero(self.item_mask)                 # global ids of its items
        self.local_item = np.full(fed.n_items, -1, np.int64)
        self.local_item[self.items] = np.arange(len(self.items))
        tr = [self.local_item[fed.rows("train", int(u))] for u in users.tolist()]
        self.train_u = np.concatenate([np.full(len(t), k, np.int64) for k, t in enumerate(tr)]) if tr else np.zeros(0, np.int64)
        self.train_i = np.concatenate(tr) if tr else np.zeros(0, np.int64)
        if (self.train_i < 0).any():
            raise ValueError(f"client {cid}: a training item outside its own item set")
        self.bias_aware = self.p.lpsfed_loss == "bc"

    # ------------------------------------------------------------------ model
    def model(self) -> L.LGCN:
        cfg = self.cfg
        prm = self.p
        m = L.LGCN(len(self.users), len(self.items), cfg["dim"], prm.lgcn_layers, prm.lgcn_phi,
                   prm.lgcn_mlp, bias=self.bias_aware)
        return m

    def basis(self) -> tuple[np.ndarray, np.ndarray, float]:
        """(P, λ, seconds spent computing them now: 0 when they came from the node's cache)."""
        cfg = self.cfg
        prm = self.p
        key = hashlib.sha256(json.dumps([data_key(cfg), self.cid, prm.lgcn_phi]).encode()).hexdigest()[:24]
        path = Path(default_cache()) / "lgcn" / f"{key}.npz"
        if path.is_file():
            try:
                a = load_npz(path)
                return a["basis"], a["eigenvalues"], 0.0
            except Exception:  # a corrupt cache entry is recomputed
                path.unlink(missing_ok=True)
        t0 = time.perf_counter()
        p, lam = L.spectral_basis(len(self.users), len(self.items), self.train_u, self.train_i, prm.lgcn_phi,
                                  stable_seed(cfg["seed"], "lanczos", self.cid))
        dt = time.perf_counter() - t0
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save_npz(path, {"basis": p, "eigenvalues": lam})
        return p, lam, dt

    def pop_buckets(self) -> tuple[np.ndarray, np.ndarray]:
        du = np.bincount(self.train_u, minlength=len(self.users))
        di = np.bincount(self.train_i, minlength=len(self.items))
        return L.pop_bucket(du), L.pop_bucket(di)

    def init_state(self) -> dict[str, np.ndarray]:
        cfg = self.cfg
        m = self.model()
        m.init_params(stable_seed(cfg["seed"], "lgcn-init", self.cid))
        shared = L.shared_init(cfg, self.fed.n_items)          # every client starts from one θ⁰
        state = {k: v.detach().numpy().copy() for k, v in m.named_parameters()}
        state.update(shared)
        return state

    # ------------------------------------------------------------------ phases
    def phase_stats(self, rnd, state, shared, personal) -> PhaseResult:
        n_e = len(self.train_i)
        n_u, n_i = len(self.users), len(self.items)
        stats = np.array([n_u, n_i, n_e, 2.0 * n_e / max(n_u + n_i, 1)], np.float32)
        return PhaseResult(payload={"stats": stats}, metrics={"num-examples": n_e})

    def phase_train(self, rnd, state, shared, personal) -> PhaseResult:
        cfg = self.cfg
        prm = self.p
        torch.manual_seed(stable_seed(cfg["seed"], "torch", self.cid, rnd))
        m = self.model()
        params = {k: v for k, v in state.items() if not k.startswith(("opt/", "margin"))}
        params.update({k: v for k, v in personal.items() if k.startswith(("pool.", "pred."))})
        set_params(m, params)
        p, lam, eig_s = self.basis()
        m.basis = torch.as_tensor(p)
        pu, pi = self.pop_buckets()
        pu, pi = torch.as_tensor(pu), torch.as_tensor(pi)
        margin_upd = float(personal["margin"][0]) if "margin" in personal else None
        shared_names = m.shared_names()
        bias_names = [n for n, _ in m.named_parameters() if n.startswith("bias_")]
        opt = torch.optim.RMSprop(m.parameters(), lr=cfg["lr"], weight_decay=prm.lpsfed_weight_decay)
        load_opt(opt, m, state)
        g = rng(cfg["seed"], "lpsfed-batches", self.cid, rnd)
        n_u = len(self.users)
        pos_sets = [set() for _ in range(n_u)]
        for u, i in zip(self.train_u.tolist(), self.train_i.tolist()):
            pos_sets[u].add(i)
        n_items = len(self.items)
        total, seen, margins = 0.0, 0, []
        joint = prm.lpsfed_bias_train == "joint"   # the code: no warm-up, bias tables trained through ξ̂
        epochs = cfg["local-epochs"]
        for e in range(epochs):
            global_epoch = (rnd - 1) * epochs + e
            warm = self.bias_aware and not joint and global_epoch < prm.lpsfed_freeze_epochs
            neg = negatives(g, self.train_u, pos_sets, n_items)
            order = g.permutation(len(self.train_u))
            last = e == epochs - 1
            for a in range(0, len(order), cfg["batch-size"]):
                sel = order[a:a + cfg["batch-size"]]
                u = torch.as_tensor(self.train_u[sel])
                i = torch.as_tensor(self.train_i[sel])
                j = torch.as_tensor(neg[sel])
                opt.zero_grad(set_to_none=True)
                if warm:   # the first local epochs train the bias encoders alone (L_bias, Eq. 7)
                    xi = m.bias_cosine(pu[u], pi[i])
                    xj = m.bias_cosine(pu[u], pi[j])
                    loss = L.info_nce(xi, xj, prm.lpsfed_tau2)
                    trainable = set(bias_names)
                    if last:   # M_c of a warm-up round: Eq. 8 with the current model (sent, not trained)
                        with torch.no_grad():
                            e_pos = m.pooled(torch.cat([u, n_u + i]))
                            r_ui = m.angle(e_pos[:len(u)], e_pos[len(u):], prm.lpsfed_scorer)
                            margins.append(torch.minimum(prm.lpsfed_gamma * m.bias_angle(pu[u], pi[i]),
                                                         math.pi - r_ui))
                else:
                    nodes = torch.cat([u, n_u + i, n_u + j])
                    e_all = m.pooled(nodes)
                    eu, ei, ej = e_all[:len(u)], e_all[len(u):2 * len(u)], e_all[2 * len(u):]
                    c_ui = m.cosine(eu, ei, prm.lpsfed_scorer)
                    c_uj = m.cosine(eu, ej, prm.lpsfed_scorer)   # negatives: cos R̂ itself (Eq. 9)
                    if self.bias_aware:
                        r_ui = torch.arccos(c_ui.clamp(-1 + 1e-7, 1 - 1e-7))
                        xi_hat = m.bias_angle(pu[u], pi[i])
                        m_ui = torch.minimum(prm.lpsfed_gamma * xi_hat, math.pi - r_ui)       # Eq. 8
                        base = margin_upd if margin_upd is not None else float(m_ui.detach().mean())
                        fm = prm.lpsfed_omega * base + (1 - prm.lpsfed_omega) * m_ui        # Eq. 15
                        pos = torch.cos((r_ui + fm).clamp(0.0, math.pi))
                        loss = L.info_nce(pos, c_uj, prm.lpsfed_tau1)               # Eq. 9
                        if last:
                            margins.append(m_ui.detach())
                        trainable = set(n for n, _ in m.named_parameters())
                        if not joint:
                            trainable -= set(bias_names)
                    else:
                        loss = L.bpr(c_ui, c_uj)
                        trainable = set(n for n, _ in m.named_parameters())
                loss.backward()
                for n_, p_ in m.named_parameters():
                    if n_ not in trainable:
                        p_.grad = None     # frozen: RMSprop skips parameters without a gradient
                opt.step()
                total += float(loss.detach()) * len(sel)
                seen += len(sel)
        new = {k: v.detach().numpy().copy() for k, v in m.named_parameters()}
        new.update(save_opt(opt, m))
        k_client = m.kernel[-1].detach().numpy().astype(np.float64) * lam                    # Eq. 6
        rho = kernel_similarity(shared["reference"], k_client, prm.lpsfed_similarity) if "reference" in shared else 0.0
        m_c = float(torch.cat(margins).mean()) if margins else (margin_upd if margin_upd is not None else 0.0)
        payload = {k: new[k] for k in shared_names}
        payload["rho"] = np.array([rho], np.float32)
        payload["margin"] = np.array([m_c], np.float32)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return PhaseResult(payload=payload, state=new,
                           metrics={"num-examples": len(self.train_i), "train-loss": total / max(seen, 1),
                                    "rho": rho, "margin": m_c, "eig-s": eig_s, "peak-rss-mb": rss})

    # ------------------------------------------------------------------ evaluation
    def evaluate_split(self, state, shared, personal, split: str) -> dict[str, np.ndarray]:
        """Full ranking over the client's own items (docs/methods/lpsfed.md), users in chunks.

        The scores (:meth:`LGCN.rank_matrix`: the order of R̂ ascending) are computed in float64
        from the float32 parameters and basis: float32 R̂ scored an early-round model's ~500 items
        into a few dozen values per user, so its top 20 was picked among exact ties by the item id
        and the last bit of the BLAS and vector kernels, which differ between machines (the golden
        lines of the LGCN presets; tests/test_lpsfed.py)."""
        fed = self.fed
        m = self.model().double()
        set_params(m, {k: v for k, v in state.items() if not k.startswith(("opt/", "margin"))})
        m.basis = torch.as_tensor(self.basis()[0], dtype=torch.float64)
        m.eval()
        truth_all = [self.local_item[fed.rows(split, int(u))] for u in self.users.tolist()]
        local = [k for k, t in enumerate(truth_all) if (t >= 0).any()]
        if not local:
            return {}
        n_u = len(self.users)
        out: dict[str, list] = {}
        with torch.no_grad():
            e = m.pooled(torch.arange(n_u + len(self.items)))
            eu_all, ei = e[:n_u], e[n_u:]
            for a in range(0, len(local), 64):
                rows = local[a:a + 64]
                s = m.rank_matrix(eu_all[rows], ei, self.p.lpsfed_scorer).numpy()   # float64
                truth = []
                for k, row in enumerate(rows):
                    u = int(self.users[row])
                    s[k, self.local_item[fed.rows("train", u)]] = -np.inf   # larger score (smaller R̂) ranks higher
                    if split == "test" and self.cfg["test-mask-valid"]:
                        v = self.local_item[fed.rows("valid", u)]
                        s[k, v[v >= 0]] = -np.inf
                    truth.append(truth_all[row][truth_all[row] >= 0])
                for name, v in M.full_rank_user_metrics(s, truth, self.ks).items():
                    out.setdefault(name, []).extend(np.asarray(v).tolist())
        return {k: np.asarray(v) for k, v in out.items()}

    def scores(self, state, shared, personal, local_users, items):
        raise NotImplementedError("LPSFed clients rank their own item set; top-K export is not supported")


def negatives(g: np.random.Generator, users: np.ndarray, pos_sets: list[set], n_items: int) -> np.ndarray:
    """One uniform negative per training edge from the client's items not in the user's train
    list (train_model.py:145-154), redrawn until it is not a positive."""
    neg = g.integers(0, n_items, len(users))
    for k in range(len(users)):
        ps = pos_sets[users[k]]
        if len(ps) >= n_items:
            continue
        while int(neg[k]) in ps:
            neg[k] = g.integers(0, n_items)
    return neg


def set_params(m: torch.nn.Module, arrays: dict[str, np.ndarray]) -> None:
    params = dict(m.named_parameters())
    with torch.no_grad():
        for k, v in arrays.items():
            if k in params:
                params[k].copy_(torch.as_tensor(np.ascontiguousarray(v)))


def save_opt(opt: torch.optim.Optimizer, m: torch.nn.Module) -> dict[str, np.ndarray]:
    """RMSprop state (kept across rounds: the code trains with one optimiser throughout)."""
    out = {}
    for name, p in m.named_parameters():
        st = opt.state.get(p, {})
        if "square_avg" in st:
            out[f"opt/{name}/square_avg"] = st["square_avg"].numpy().copy()
            out[f"opt/{name}/step"] = np.array([float(st["step"])], np.float64)
    return out


def load_opt(opt: torch.optim.Optimizer, m: torch.nn.Module, state: dict[str, np.ndarray]) -> None:
    for name, p in m.named_parameters():
        key = f"opt/{name}/square_avg"
        if key in state:
            opt.state[p] = {"step": torch.tensor(float(state[f"opt/{name}/step"][0])),
                            "square_avg": torch.as_tensor(state[key]).clone()}
