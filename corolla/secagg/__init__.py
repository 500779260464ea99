"""SecAgg+ for a sum of one vector per node (Bell et al., CCS 2020; the protocol of Bonawitz et al.,
CCS 2017, Fig. 4, on a sparse neighbour graph), Flower-free: the pure steps of both sides.

* :mod:`corolla.secagg.primitives` — ECDH P-384, AES-GCM, Shamir sharing, the mask generator,
  quantisation;
* :mod:`corolla.secagg.identity` — node signing keys and trust lists (the malicious-server model);
* :mod:`corolla.secagg.params` — the parameters and the masking graph;
* :mod:`corolla.secagg.node` — a node's steps and its state;
* :mod:`corolla.secagg.server` — the server's steps.

One aggregation of a round's summed phase, over the ``n`` nodes that host its clients:

1. **setup**: each node makes two key pairs ``(sk1, pk1)`` (pairwise masks) and ``(sk2, pk2)``
   (share encryption) and returns the public keys, signed with its node key when it has one;
2. **share**: the server sends each node its neighbours' keys; the node checks them (signatures
   against its trust list), draws its self-mask seed ``b_u``, Shamir-shares ``b_u`` and ``sk1_u``
   among its neighbourhood with threshold ``t`` and returns one AES-GCM ciphertext per neighbour
   and ``SHA-256(b_u)``;
3. **collect**: the phase itself, sent only to the nodes whose share set was complete: the node
   trains its clients, sums their uploads into one vector ``x_u`` and returns
   ``y_u = q(x_u) + PRG(b_u) ± Σ_v PRG(s_uv) mod 2^32`` — once;
4. **confirm** (signed rounds): the server names the survivors ``A`` (the nodes whose ``y`` it
   took); each signs ``A``;
5. **unmask**: the server sends ``A`` and the signatures; a node that holds ``t`` signatures of
   ``A`` from its neighbours (signed rounds) returns its shares of ``b_v`` for ``v ∈ A`` and of
   ``sk1_d`` for the neighbours ``d`` that shared but are not in ``A`` — never both for one node.
   The server rebuilds and checks each secret, removes the masks, range-checks the sum and
   dequantises.

**Quantisation error.** ``q = stochastic_round((clip(x) + c)·2^bits/(2c))``: each value of each
node is off by less than ``2c/2^bits`` (zero in expectation), so a sum over ``n`` nodes is off
by less than ``n·2c/2^bits`` per value; values outside ``[-c, c]`` would be clipped, so a node
refuses to send a vector beyond ``c``.
"""
from corolla.secagg.params import Params, hood_size, neighbour_graph
from corolla.secagg.primitives import MOD, SecAggError, dequantise_sum, prg, quantise

__all__ = ["MOD", "Params", "SecAggError", "dequantise_sum", "hood_size", "neighbour_graph", "prg", "quantise"]
