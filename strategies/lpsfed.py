"""LPSFed server (ICLR'26; paper §3.2–3.3, Eq. 11–15, App. D.3; docs/methods/lpsfed.md) and FedAvg-LGCN.

Setup (round 1, phase ``stats``, with ``lpsfed-stats``): every client sends (n_users, n_items,
n_edges, mean degree) of its subgraph; the server builds the reference graph G_R — GNMK with the
mean sizes and k = the mean edge count (``lpsfed-reference = gnmk``; ``lpsfed-gnmk-edges = code``:
k = edges/4 as the code) or Erdős–Rényi with p = |E|/(n_u + n_i)² — and its reference kernel K_R:
the Φ smallest eigenvalues of G_R's normalised Laplacian. Without statistics (the "w/o stats"
ablation) G_R has fixed sizes (1024 users, 1024 items, 8192 edges; the paper does not say what it
used). K_R travels to the clients with every ``train`` message (Φ floats).

Each round, phase ``train``: clients upload θ_c (pooling + predictive MLPs), ρ_c = KL(K_R ‖ K_c)
and M_c; the server forms ρ̄_c (Eq. 12: ``lpsfed-normalize = minmax`` 1 − (ρ−min)/(max−min), the
README; ``code``: 1 − ρ/max, 0.5 when max = 0), θ̄ and M̄ (Eq. 13, unweighted), and sends each
client θ_c ← ρ̄_c θ̄ + (1 − ρ̄_c) θ_c and M_c ← ρ̄_c M̄ + (1 − ρ̄_c) M_c (Eq. 14; ``lpsfed-margin =
global`` sends M̄ as the code does). ``lpsfed-personalize = false`` (the "w/o per" ablation and
the FedAvg baseline) sets ρ̄ ≡ 1. The server never receives embeddings, kernels, eigenvectors,
eigenvalues or the bias encoders (``expected_payload`` admits only the MLPs and two scalars).
"""

from __future__ import annotations

import time
from logging import INFO, WARNING

import numpy as np
from flwr.common.logger import log

from corolla.models import lgcn as L
from corolla.protocol import ArraySpec
from corolla.round import DEFAULT_CONTROL, Download, Phase
from corolla.util import stable_seed
from strategies.base import CorollaStrategy

FIXED_REFERENCE = (1024, 1024, 8192)   # G_R without client statistics [assumption: the paper's "w/o stats" does not say; docs/methods/lpsfed.md]


def normalised_rho(rho: np.ndarray, mode: str) -> np.ndarray:
    """ρ̄ (Eq. 12): high when a client is close to the reference."""
    rho = np.asarray(rho, np.float64)
    if mode == "code":
        mx = rho.max()
        return np.full_like(rho, 0.5) if mx <= 0 else 1.0 - rho / mx
    lo, hi = rho.min(), rho.max()
    return np.ones_like(rho) if hi - lo <= 0 else 1.0 - (rho - lo) / (hi - lo)


def reference_kernel(n_users: float, n_items: float, n_edges: float, kind: str, phi: int, seed: int) -> np.ndarray:
    """K_R: the ``phi`` smallest eigenvalues of the normalised Laplacian of G_R."""
    from networkx.algorithms import bipartite

    nu, ni, ne = int(round(n_users)), int(round(n_items)), int(round(n_edges))
    if kind == "er":
        p = min(1.0, ne / float(nu + ni) ** 2)
        g = bipartite.random_graph(nu, ni, p, seed=seed % (2**32))
    else:
        g = bipartite.gnmk_random_graph(nu, ni, min(ne, nu * ni), seed=seed % (2**32))
    edges = np.array([(a, b - nu) for a, b in g.edges() if a < nu <= b] +
                     [(b, a - nu) for a, b in g.edges() if b < nu <= a], np.int64).reshape(-1, 2)
    _, lam = L.spectral_basis(nu, ni, edges[:, 0], edges[:, 1], phi, seed)
    if len(lam) < phi:
        lam = np.pad(lam, (0, phi - len(lam)), constant_values=lam[-1] if len(lam) else 0.0)
    return lam.astype(np.float64)


class LPSFed(CorollaStrategy):
    """LPSFed's server (paper §3.2–3.3). ``personalized = False`` (FedAvg-LGCN, set by the method
    table) mixes with ρ̄ ≡ 1; ``uses_stats = False`` builds the fixed-size reference graph."""

    personalized = True
    uses_stats = True

    def __init__(self, cfg):
        super().__init__(cfg)
        self.reference: np.ndarray | None = None
        self.theta: dict[int, dict[str, np.ndarray]] = {}   # per-client θ_c for the next round
        self.margin: dict[int, float] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}

    @property
    def personalize(self) -> bool:
        return self.personalized and bool(self.p.lpsfed_personalize)

    def setup(self) -> None:
        self.shapes = {k: v.shape for k, v in L.shared_init(self.cfg, self.n_items).items()}
        if not self.uses_stats or not self.p.lpsfed_stats:
            self.build_reference(*FIXED_REFERENCE)

    def summary(self) -> None:
        keys = ("method", "num-rounds", "local-epochs", "lpsfed-loss", "lpsfed-personalize", "lpsfed-stats",
                "lpsfed-reference", "lpsfed-scorer", "lgcn-mlp", "lgcn-phi")
        log(INFO, "%s: %s", type(self).__name__, {k: self.cfg[k] for k in keys})
        sp = self.data_stats.get("spectral", {})
        if sp:   # the partition (docs/methods/lpsfed.md), also in summary.json under "data"
            log(INFO, "spectral partition: %d training edges, %d kept, %d dropped across clients",
                sp["edges"], sp["edges_kept"], sp["edges_dropped"])
            for c in range(len(sp["users_per_client"])):
                log(INFO, "  client %d: %d users, %d items, %d training edges", c, sp["users_per_client"][c],
                    sp["items_per_client"][c], sp["edges_per_client"][c])

    def build_reference(self, nu: float, ni: float, ne: float) -> None:
        t0 = time.perf_counter()
        self.reference = reference_kernel(nu, ni, ne, self.p.lpsfed_reference, self.p.lgcn_phi,
                                          stable_seed(self.cfg["seed"], "reference-graph"))
        log(INFO, "reference graph %s (%d users, %d items, %d edges): K_R in %.1f s", self.p.lpsfed_reference,
            round(nu), round(ni), round(ne), time.perf_counter() - t0)

    # -------------------------------------------------------------- phases
    def phases(self, rnd):
        if self.reference is None:
            return [Phase.STATS, Phase.TRAIN]
        return [Phase.TRAIN]

    def configure_phase(self, phase, rnd, targets):
        if phase == Phase.STATS:
            return Download()
        shared = {"reference": self.reference.astype(np.float32)} if self.reference is not None else {}
        personal = {}
        for c in targets:
            if c in self.theta:
                personal[c] = {**self.theta[c], "margin": np.array([self.margin[c]], np.float32)}
        return Download(shared, personal)

    def expected_payload(self, phase, cid, control=DEFAULT_CONTROL):
        if phase == Phase.STATS:
            return {"stats": ArraySpec((4,), "float32")}
        out = {k: ArraySpec(s, "float32") for k, s in self.shapes.items()}
        out["rho"] = ArraySpec((1,), "float32")
        out["margin"] = ArraySpec((1,), "float32")
        return out

    def eval_fuses_after(self, rnd):
        return True   # each client evaluates its post-training model in the training message

    def aggregate_phase(self, phase, rnd, results):
        if phase == Phase.STATS:
            if not results:
                raise RuntimeError("LPSFed: no client sent its subgraph statistics")
            st = np.stack([results[c].payload["stats"] for c in sorted(results)]).astype(np.float64)
            nu, ni, ne = st[:, 0].mean(), st[:, 1].mean(), st[:, 2].mean()
            if self.p.lpsfed_gnmk_edges == "code":
                ne = ne / 4
            self.build_reference(nu, ni, ne)
            return {"stats-clients": len(results)}
        if not results:
            log(WARNING, "round %d: no valid update; the MLPs are unchanged", rnd)
            return {}
        cids = sorted(results)
        rho = np.array([float(results[c].payload["rho"][0]) for c in cids])
        rbar = normalised_rho(rho, self.p.lpsfed_normalize) if self.personalize else np.ones(len(cids))
        mean = {k: np.mean([results[c].payload[k] for c in cids], axis=0) for k in self.shapes}
        margins = np.array([float(results[c].payload["margin"][0]) for c in cids])
        m_bar = float(margins.mean())
        for j, c in enumerate(cids):
            own = results[c].payload
            self.theta[c] = {k: (rbar[j] * mean[k] + (1 - rbar[j]) * own[k]).astype(np.float32) for k in self.shapes}
            self.margin[c] = m_bar if self.p.lpsfed_margin == "global" else \
                float(rbar[j] * m_bar + (1 - rbar[j]) * margins[j])
        out = {"clients": len(cids), "train-loss": float(np.mean([results[c].metrics.get("train-loss", np.nan)
                                                                    for c in cids]))}
        for j, c in enumerate(cids):
            out[f"rho/{c}"] = float(rho[j])
            out[f"rho-bar/{c}"] = float(rbar[j])
            out[f"margin/{c}"] = float(margins[j])
            m = results[c].metrics
            if m.get("eig-s"):          # the eigen-decomposition's one-time cost (0 once cached on the node)
                out[f"eig-s/{c}"] = float(m["eig-s"])
            if "peak-rss-mb" in m:      # peak resident memory of the process that trained c
                out[f"peak-rss-mb/{c}"] = float(m["peak-rss-mb"])
        return out

    # -------------------------------------------------------------- checkpoint
    def state_dict(self):
        out = {f"theta/{c}/{k}": v for c, d in self.theta.items() for k, v in d.items()}
        out.update({f"margin/{c}": np.array([v]) for c, v in self.margin.items()})
        if self.reference is not None:
            out["reference"] = self.reference
        return out

    def load_state_dict(self, state):
        self.theta, self.margin = {}, {}
        for key, v in state.items():
            if key.startswith("theta/"):
                _, c, k = key.split("/", 2)
                self.theta.setdefault(int(c), {})[k] = v
            elif key.startswith("margin/"):
                self.margin[int(key.split("/")[1])] = float(v[0])
        self.reference = state.get("reference")
