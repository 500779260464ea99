"""MetaMF (Lin et al., SIGIR'20, "Meta Matrix Factorization for Federated Rating Predictions"; the
authors' code TempSDU/MetaMF bbfdf0b ``MetaMF.py``): a meta network on the server that generates,
for each user, the parameters of a private rating-prediction (RP) model and a private item table
(the paper's Fig. 1: the collaborative memory (CM) and meta recommender (MR) modules with the
rise-dimensional generation (RG) on the server, the RP module on the device).

For user u (``MetaRecommender.forward``, MetaMF.py:46-66):

* collaborative vector c_u = e_u M (e_u: the user's embedding, M: the "memory"; a linear map,
  MetaMF.py:48-49);
* RP layer 1: h = ReLU(H₁ c_u), W₀ = (A₁ h).view(d, d/4), b₀ = B₁ h; RP layer 2 likewise with its
  own H₂: W₁ (d/4 × 1), b₁ (MetaMF.py:30-31, 67-74);
* item table (rise-dimensional generation): h₃ = ReLU(H₃ c_u), Q_u = (E₁ h₃).view(I, k) ·
  (E₂ h₃).view(k, d) (MetaMF.py:32, 76-84);
* prediction of item i: ŷ = ReLU(q_i W₀ + b₀) W₁ + b₁, no output activation (MetaMF.py:97-111);
  loss ``mean((ŷ − r)²)`` (MetaMF.py:113-115).

The parameter names and shapes are the code's (without its ``metarecommender.`` prefix), so its
state dict loads as it is (``tests/test_metamf.py`` checks one Adam step against golden tensors of
the authors' module, ``benchmarks/authors_golden.py metamf``). The code selects q_i by a one-hot
matrix product; :meth:`MetaMF.forward` gathers the row, which is the same function.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

GENERATED = ("item.weight", "rp.w0", "rp.b0", "rp.w1", "rp.b1")   # what the server sends each user


class MetaMF(nn.Module):
    def __init__(self, n_users: int, n_items: int, dim: int = 32, rank: int = 8, user_dim: int = 32,
                 memory: int = 128, hidden: int = 512):
        super().__init__()
        self.n_items, self.dim, self.rank, self.rp_hidden = n_items, dim, rank, int(dim / 4)
        self.user_embedding = nn.Embedding(n_users, user_dim)
        self.memory = nn.Parameter(torch.empty(user_dim, memory))
        h = self.rp_hidden
        self.hidden_layer_1, self.weight_layer_1, self.bias_layer_1 = self._layer(memory, hidden, dim, h)
        self.hidden_layer_2, self.weight_layer_2, self.bias_layer_2 = self._layer(memory, hidden, h, 1)
        self.hidden_layer_3 = nn.Linear(memory, hidden)
        self.emb_layer_1 = nn.Linear(hidden, n_items * rank)
        self.emb_layer_2 = nn.Linear(hidden, rank * dim)

    @staticmethod
    def _layer(memory, hidden, int_size, out_size):
        return nn.Linear(memory, hidden), nn.Linear(hidden, int_size * out_size), nn.Linear(hidden, out_size)

    def init(self, seed: int) -> None:
        """The code's initialisation: the memory Xavier-normal (MetaMF.py:28), every Linear
        Xavier-normal with zero bias (Run.ipynb cell 11), the user embedding N(0, 1) (PyTorch's
        Embedding default, untouched by the notebook)."""
        g = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name == "user_embedding.weight":
                    p.copy_(torch.randn(p.shape, generator=g))
                elif name.endswith("bias"):
                    p.zero_()
                else:   # memory and Linear weights: Xavier-normal, std = √(2 / (fan_in + fan_out))
                    fan_out, fan_in = p.shape if name != "memory" else (p.shape[1], p.shape[0])
                    p.copy_(torch.randn(p.shape, generator=g) * float(np.sqrt(2.0 / (fan_in + fan_out))))

    def collaborative(self, users: torch.Tensor) -> torch.Tensor:
        return self.user_embedding(users) @ self.memory

    def generate(self, users: torch.Tensor, items: bool = True) -> dict[str, torch.Tensor]:
        """The private parameters of ``users`` (B): ``rp.w0`` B × d × d/4, ``rp.b0`` B × d/4, ``rp.w1``
        B × d/4, ``rp.b1`` B × 1 and (``items``) ``item.weight`` B × I × d."""
        c = self.collaborative(users)
        h1 = F.relu(self.hidden_layer_1(c))
        h2 = F.relu(self.hidden_layer_2(c))
        out = {"rp.w0": self.weight_layer_1(h1).view(-1, self.dim, self.rp_hidden), "rp.b0": self.bias_layer_1(h1),
               "rp.w1": self.weight_layer_2(h2), "rp.b1": self.bias_layer_2(h2)}
        if items:
            h3 = F.relu(self.hidden_layer_3(c))
            left = self.emb_layer_1(h3).view(-1, self.n_items, self.rank)
            right = self.emb_layer_2(h3).view(-1, self.rank, self.dim)
            out["item.weight"] = left @ right
        return out

    def item_rows(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """q_i of user u's generated table for rows (u, i), generating only those rows (the same
        numbers as ``generate(users)["item.weight"][r, i]``)."""
        h3 = F.relu(self.hidden_layer_3(self.collaborative(users)))
        w = self.emb_layer_1.weight.view(self.n_items, self.rank, -1)[items]        # rows × k × hidden
        b = self.emb_layer_1.bias.view(self.n_items, self.rank)[items]
        left = (w @ h3[:, :, None]).squeeze(-1) + b                                   # rows × k
        right = self.emb_layer_2(h3).view(-1, self.rank, self.dim)
        return (left[:, None, :] @ right).squeeze(1)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """ŷ of each (user, item) row (MetaMF.forward)."""
        g = self.generate(users, items=False)
        return rp_predict(self.item_rows(users, items), g["rp.w0"], g["rp.b0"], g["rp.w1"], g["rp.b1"])


def rp_predict(q: torch.Tensor, w0: torch.Tensor, b0: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor) -> torch.Tensor:
    """The RP module (MetaMF.py:104-109): ReLU(q W₀ + b₀) W₁ + b₁ for rows q (… × d), with
    parameters broadcast over the leading axes (W₀ … × d × h, b₀ … × h, W₁ … × h, b₁ … × 1)."""
    h = F.relu((q[..., None, :] @ w0).squeeze(-2) + b0)
    return (h * w1).sum(-1) + b1[..., 0]


def code_state_dict(model: MetaMF) -> dict[str, torch.Tensor]:
    """The model's parameters under the authors' names (``metarecommender.<name>``)."""
    return {f"metarecommender.{k}": v for k, v in model.state_dict().items()}
