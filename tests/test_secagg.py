"""SecAgg+ core (``flower_io/secagg.py``): the unmasked sum equals the plain sum within the
quantisation bound, with plain SecAgg and with a sparse SecAgg+ graph, when nodes drop after
sharing keys, and fails with a clear error below the threshold; what the server holds per node is
indistinguishable from uniform noise; a node never reveals both secrets of one node."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from flower_io.secagg import (MOD, Params, SecAggError, ServerRound, neighbour_graph, node_collect,
                              node_setup, node_share_keys, node_unmask, prg, quantise)


def run(xs: dict[int, np.ndarray], p: Params, drop_after_share: set[int] = frozenset(),
        drop_after_collect: set[int] = frozenset(), seed: int = 0):
    """The four phases over in-memory messages; returns (sum, active count, server, what the
    server received per node in phase 3)."""
    ids = sorted(xs)
    srv = ServerRound(p, ids, seed=seed)
    states = {}
    for u in ids:
        states[u], pk = node_setup(u)
        srv.add_keys(u, pk)
    for u in ids:
        srv.add_shares(u, node_share_keys(states[u], p, srv.keys_for(u)))
    seen = {}
    for u in ids:
        if u in drop_after_share:
            continue
        y = node_collect(states[u], p, xs[u], srv.ciphertexts_for(u))
        seen[u] = y
        srv.add_masked(u, y)
    shares = {}
    for u in srv.active:
        if u in drop_after_collect:
            continue
        act, drop = srv.unmask_request(u)
        shares[u] = node_unmask(states[u], p, act, drop)
    total, n = srv.finish(shares)
    return total, n, srv, seen


def _vectors(n, size=500, seed=0):
    rng = np.random.default_rng(seed)
    return {u: rng.uniform(-1, 1, size) for u in range(1, n + 1)}


def test_prg_is_deterministic_uniform_and_seed_sensitive():
    a, b = prg(b"k" * 32, 10_000), prg(b"k" * 32, 10_000)
    assert np.array_equal(a, b) and a.min() >= 0 and a.max() < MOD
    assert not np.array_equal(a, prg(b"k" * 31 + b"j", 10_000))
    assert stats.kstest(a / MOD, "uniform").pvalue > 1e-3


def test_graph_is_symmetric_with_k_neighbours():
    g = neighbour_graph(list(range(1, 11)), 4, seed=3)
    assert all(len(v) == 4 and u not in v for u, v in g.items())
    assert all(u in g[v] for u, vs in g.items() for v in vs)
    assert neighbour_graph([1, 2, 3], 0, 0) == {1: {2, 3}, 2: {1, 3}, 3: {1, 2}}


@pytest.mark.parametrize("n,k,t", [(5, 0, 3), (8, 4, 3)], ids=["secagg-full", "secaggplus-k4"])
def test_sum_equals_the_plain_sum_within_the_quantisation_bound(n, k, t):
    p = Params(threshold=t, clip=1.0, bits=16, neighbours=k)
    xs = _vectors(n)
    total, count, _, _ = run(xs, p)
    plain = sum(xs.values())
    bound = n * 2 * p.clip / (1 << p.bits)
    err = np.abs(total - plain).max()
    assert count == n and err < bound, (err, bound)


def test_a_node_dropped_after_sharing_keys_leaves_the_survivors_sum():
    p = Params(threshold=3, clip=1.0, bits=16, neighbours=4)
    xs = _vectors(8, seed=1)
    total, count, srv, _ = run(xs, p, drop_after_share={3})
    plain = sum(x for u, x in xs.items() if u != 3)
    assert count == 7 and np.abs(total - plain).max() < 7 * 2 / (1 << 16)


def test_a_node_dropped_during_unmasking_does_not_stop_the_round():
    p = Params(threshold=3, clip=1.0, bits=16, neighbours=0)
    xs = _vectors(5, seed=2)
    total, count, _, _ = run(xs, p, drop_after_collect={2})   # its masked vector is in, its shares not
    assert count == 5 and np.abs(total - sum(xs.values())).max() < 5 * 2 / (1 << 16)


def test_below_the_threshold_the_round_fails_with_a_clear_error():
    p = Params(threshold=4, clip=1.0, bits=16, neighbours=0)
    xs = _vectors(5, seed=3)
    with pytest.raises(SecAggError, match="fewer than the threshold 4"):
        run(xs, p, drop_after_share={1, 2})
    with pytest.raises(SecAggError, match="too many nodes dropped"):
        run(xs, p, drop_after_collect={1, 2})


def test_the_server_never_holds_an_unmasked_node_vector():
    """What the server receives per node is uniform noise modulo 2^32 (Kolmogorov-Smirnov), and
    uncorrelated with the node's quantised vector; only the unmasked sum equals the plain sum."""
    p = Params(threshold=3, clip=1.0, bits=16, neighbours=0)
    xs = _vectors(5, size=20_000, seed=4)
    total, _, _, seen = run(xs, p)
    for u, y in seen.items():
        q = quantise(xs[u], p)
        assert stats.kstest(y / MOD, "uniform").pvalue > 1e-4, u
        assert abs(np.corrcoef(y.astype(np.float64), q.astype(np.float64))[0, 1]) < 0.05, u
        assert not np.array_equal(y, q)
    assert np.abs(total - sum(xs.values())).max() < 5 * 2 / (1 << 16)


def test_a_node_refuses_to_reveal_both_secrets_of_a_node():
    p = Params(threshold=2, clip=1.0, bits=8)
    st, pk = node_setup(1)
    st2, pk2 = node_setup(2)
    node_share_keys(st, p, {1: pk, 2: pk2})
    with pytest.raises(SecAggError, match="both secrets"):
        node_unmask(st, p, [1, 2], [2])
    with pytest.raises(SecAggError, match="its own mask key"):
        node_unmask(st, p, [2], [1])


def test_bad_parameters_and_key_lists_are_clear_errors():
    with pytest.raises(SecAggError, match="overflows"):
        Params(threshold=2, clip=1.0, bits=24).check(300)
    with pytest.raises(SecAggError, match="own keys"):
        st, _ = node_setup(1)
        node_share_keys(st, Params(2, 1.0), {1: (b"x", b"y"), 2: (b"z", b"w")})
