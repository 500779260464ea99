"""Golden tensors from the authors' code on tiny cases, for the tests of the centralised SGL reference
and of MetaMF (``tests/test_central.py``, ``tests/test_metamf.py``).

The authors' code is not vendored (neither repository carries a licence): this script imports it
from a checkout and writes what it computes, with every input, to ``tests/data/*.npz``.

* ``sgl``: wujcan/SGL-Torch @ c5632881 (``model/general_recommender/SGL.py``): the views that
  ``SGL.create_adj_mat`` builds from given kept edges / dropped nodes (its ``randint_choice``
  replaced by the given draws), ``_LightGCN.forward`` and the loss lines 273-287 on a 4-user ×
  5-item graph, the gradients, and the parameters after one ``torch.optim.Adam`` step. Its only
  edits for Python ≥ 3.10 are two ``collections.abc`` imports; its cython sampler must be built
  (``python local_compile_setup.py build_ext --inplace``).
* ``metamf``: TempSDU/MetaMF @ bbfdf0b (``MetaMF.py``): the model (small widths: item embedding 8,
  rank 3, user embedding 6, memory 10, hidden 12) with ``Run.ipynb``'s initialisation
  (Xavier-normal Linear weights, zero biases; seeds 1) on 5 users × 7 items, one
  batch of 6 (user, item, rating) rows, MSE (``MetaMF.loss``), ``clip_grad_norm_(·, 5)`` and one
  Adam(1e-4, weight decay 1e-3) step (cells 11, 15, 17): its parameters before and after.

    python benchmarks/authors_golden.py sgl PATH/TO/SGL-Torch
    python benchmarks/authors_golden.py metamf PATH/TO/MetaMF

(run with a torch that the checkout's code accepts; written here with torch 2.13.0+cpu.)
"""

from __future__ import annotations

import argparse
import os
import sys
import types
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data"

# the SGL case: 4 users, 5 items, 11 training edges, d = 4, 3 layers
SGL_USERS = np.array([0, 0, 0, 1, 1, 2, 2, 2, 3, 3, 3])
SGL_ITEMS = np.array([0, 1, 3, 1, 2, 0, 2, 4, 1, 3, 4])
SGL_KEEP1 = np.array([0, 1, 3, 4, 5, 8, 10])          # ed: int(11 · (1 − 0.3)) = 7 edges kept
SGL_KEEP2 = np.array([1, 2, 3, 5, 6, 9, 10])
SGL_ND_USERS, SGL_ND_ITEMS = np.array([2]), np.array([3])   # nd: ⌊0.3·4⌋ = 1 user, ⌊0.3·5⌋ = 1 item
SGL_BATCH = {"user": np.array([0, 2, 3, 1, 0]), "pos": np.array([1, 4, 3, 2, 3]), "neg": np.array([2, 1, 0, 4, 4])}


def sgl(root: str) -> None:
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, root)
    os.chdir(root)
    import model.general_recommender.SGL as S
    from util.pytorch import l2_loss, sp_mat_to_sp_tensor

    nu, ni, d, layers, ratio, temp, ssl_reg, reg = 4, 5, 4, 3, 0.3, 0.2, 0.1, 1e-2
    pairs = np.c_[SGL_USERS, SGL_ITEMS]
    draws: list = []
    S.randint_choice = lambda *a, **k: draws.pop(0)   # the given draws instead of the cython sampler
    fake = types.SimpleNamespace(num_users=nu, num_items=ni, ssl_ratio=ratio,
                                 dataset=types.SimpleNamespace(train_data=types.SimpleNamespace(
                                     to_user_item_pairs=lambda: pairs)))
    adj = S.SGL.create_adj_mat.__wrapped__ if hasattr(S.SGL.create_adj_mat, "__wrapped__") else S.SGL.create_adj_mat
    full = adj(fake)
    draws[:] = [SGL_KEEP1]
    v1 = adj(fake, is_subgraph=True, aug_type="ed")
    draws[:] = [SGL_KEEP2]
    v2 = adj(fake, is_subgraph=True, aug_type="ed")
    draws[:] = [SGL_ND_USERS, SGL_ND_ITEMS]
    vnd = adj(fake, is_subgraph=True, aug_type="nd")
    torch.manual_seed(0)
    net = S._LightGCN(nu, ni, d, sp_mat_to_sp_tensor(full), layers)
    net.reset_parameters(init_method="xavier_uniform")
    u0, i0 = net.user_embeddings.weight.detach().clone(), net.item_embeddings.weight.detach().clone()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    b = {k: torch.as_tensor(v) for k, v in SGL_BATCH.items()}
    sup, lu, li = net(sp_mat_to_sp_tensor(v1), sp_mat_to_sp_tensor(v2), b["user"], b["pos"], b["neg"])
    bpr = -torch.sum(F.logsigmoid(sup))                                            # SGL.py:273
    reg_loss = l2_loss(net.user_embeddings(b["user"]), net.item_embeddings(b["pos"]),
                       net.item_embeddings(b["neg"]))                                # SGL.py:276-280
    infonce = torch.sum(torch.logsumexp(lu / temp, dim=1) + torch.logsumexp(li / temp, dim=1))   # SGL.py:283-285
    loss = bpr + ssl_reg * infonce + reg * reg_loss                                # SGL.py:287
    opt.zero_grad()
    loss.backward()
    gu, gi = net.user_embeddings.weight.grad.clone(), net.item_embeddings.weight.grad.clone()
    opt.step()
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez(OUT / "sgl_golden.npz", users=SGL_USERS, items=SGL_ITEMS, keep1=SGL_KEEP1, keep2=SGL_KEEP2,
             nd_users=SGL_ND_USERS, nd_items=SGL_ND_ITEMS, **{f"batch_{k}": v for k, v in SGL_BATCH.items()},
             params=np.array([nu, ni, d, layers]), hyper=np.array([ratio, temp, ssl_reg, reg]),
             full=full.toarray(), view1=v1.toarray(), view2=v2.toarray(), view_nd=vnd.toarray(),
             user0=u0.numpy(), item0=i0.numpy(), bpr=bpr.item(), infonce=infonce.item(), reg=reg_loss.item(),
             loss=loss.item(), grad_user=gu.numpy(), grad_item=gi.numpy(),
             user1=net.user_embeddings.weight.detach().numpy(), item1=net.item_embeddings.weight.detach().numpy())
    print(f"wrote {OUT / 'sgl_golden.npz'}: loss {loss.item():.6f} (bpr {bpr.item():.6f}, infonce {infonce.item():.6f})")


def metamf(root: str) -> None:
    import random

    import torch
    import torch.nn as nn

    sys.path.insert(0, root)
    from MetaMF import MetaMF

    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)                     # Run.ipynb cell 1
    n_users, n_items = 5, 7
    sizes = {"item_emb_size": 8, "item_mem_num": 3, "user_emb_size": 6, "mem_size": 10, "hidden_size": 12}
    net = MetaMF(n_users, n_items, **sizes)   # the code's architecture, small widths (a small file)

    def weights_init(m):                     # Run.ipynb cell 11
        if isinstance(m, nn.Linear):
            nn.init.xavier_normal_(m.weight)
            nn.init.zeros_(m.bias)

    net.apply(weights_init)
    before = {k: v.detach().clone().numpy() for k, v in net.state_dict().items()}
    opt = torch.optim.Adam(net.parameters(), lr=1e-4, weight_decay=1e-3)   # cell 15
    users = np.array([0, 1, 1, 3, 4, 2])
    items = np.array([2, 0, 6, 2, 5, 3])
    ratings = np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0], np.float32)
    u, i, r = torch.as_tensor(users), torch.as_tensor(items), torch.as_tensor(ratings)
    opt.zero_grad()                          # cell 17
    pred = net(u, i)
    loss = net.loss(pred, r)
    loss.backward()
    grads = {k: v.grad.detach().clone().numpy() for k, v in net.named_parameters()}
    nn.utils.clip_grad_norm_(net.parameters(), 5)
    opt.step()
    after = {k: v.detach().clone().numpy() for k, v in net.state_dict().items()}
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT / "metamf_golden.npz", users=users, items=items, ratings=ratings,
             sizes=np.array([sizes[k] for k in ("item_emb_size", "item_mem_num", "user_emb_size", "mem_size",
                                                "hidden_size")]), pred=pred.detach().numpy(),
             loss=loss.item(), **{f"before/{k}": v for k, v in before.items()},
             **{f"grad/{k}": v for k, v in grads.items()}, **{f"after/{k}": v for k, v in after.items()})
    print(f"wrote {OUT / 'metamf_golden.npz'}: loss {loss.item():.6f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("which", choices=("sgl", "metamf"))
    ap.add_argument("root", help="the authors' checkout")
    a = ap.parse_args()
    {"sgl": sgl, "metamf": metamf}[a.which](os.path.abspath(a.root))


if __name__ == "__main__":
    main()
