"""SecAgg+ core (``corolla.secagg``), honest and under attack at the protocol level.

Honest: the unmasked sum equals the plain sum within the quantisation bound, with plain SecAgg
and on a sparse SecAgg+ graph, with nodes dropped after sharing keys or during unmasking, signed
or not; below the threshold the round fails with a clear error; what the server holds per node
is uniform noise. Hostile (each a finding of the review behind issue 35, as an attacker would
play it): a second masked vector, an incomplete share set, a malformed key, corrupted shares, a
vector out of range (never a wrong sum); parameters a node refuses; stages out of order; a server
that lies about who survived or substitutes keys (nothing revealed when nodes sign); a masking
graph that is fresh every round."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from corolla.secagg import identity, node
from corolla.secagg.params import Params, hood_size, neighbour_graph
from corolla.secagg.primitives import (MOD, SecAggError, combine_shares, commitment, key_pair, open_sealed, prg,
                                       public_of, quantise, shared_key)
from corolla.secagg.server import KeyEntry, ServerRound
from tests.secagg_helpers import PHASE, RND, RUN, Round, bound, node_keys, vectors


def P(n, t=0, k=0, clip=1.0, bits=16):
    return Params.from_config({"secagg-threshold": t, "secagg-neighbours": k, "secagg-clip": clip,
                               "secagg-bits": bits}, n)


@pytest.fixture(scope="module")
def signed5(tmp_path_factory):
    paths, trust = node_keys(tmp_path_factory.mktemp("keys"), 5)
    return {u: identity.Signer(paths[u - 1]) for u in range(1, 6)}, identity.load_trusted(trust)


# ------------------------------------------------------------------------------ honest
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


def test_quantisation_is_unbiased_within_one_step():
    x = np.linspace(-1, 1, 20_001)
    q = np.stack([quantise(x, 1.0, 8) for _ in range(200)]).astype(np.float64)
    back = q * (2 / 256) - 1
    assert np.abs(back - x).max() <= 2 / 256
    assert abs(float((back.mean(0) - x).mean())) < 1e-4


@pytest.mark.parametrize("n,k", [(5, 0), (8, 4)], ids=["secagg-full", "secaggplus-k4"])
def test_sum_equals_the_plain_sum_within_the_quantisation_bound(n, k):
    p = P(n, k=k)
    xs = vectors(n)
    total, count = Round(xs, p).run()
    assert count == n and np.abs(total - sum(xs.values())).max() < bound(n, p)


def test_signed_round_sums_the_same(signed5):
    signers, trusted = signed5
    xs = vectors(5, seed=7)
    r = Round(xs, P(5), signers, trusted)
    total, count = r.run()
    assert r.srv.signed and len(r.srv.confirmations) == 5
    assert count == 5 and np.abs(total - sum(xs.values())).max() < bound(5, r.p)


def test_a_node_dropped_after_sharing_keys_leaves_the_survivors_sum():
    p = P(8, k=4)
    xs = vectors(8, seed=1)
    total, count = Round(xs, p).run(drop_after_share={3})
    assert count == 7 and np.abs(total - sum(x for u, x in xs.items() if u != 3)).max() < bound(7, p)


def test_a_node_dropped_during_unmasking_does_not_stop_the_round():
    p = P(5)
    xs = vectors(5, seed=2)
    total, count = Round(xs, p).run(drop_after_collect={2})   # its masked vector is in, its shares not
    assert count == 5 and np.abs(total - sum(xs.values())).max() < bound(5, p)


def test_below_the_threshold_the_round_fails_with_a_clear_error():
    p = P(5, t=4)
    with pytest.raises(SecAggError, match="fewer than the threshold 4"):
        Round(vectors(5, seed=3), p).run(drop_after_share={1, 2})
    with pytest.raises(SecAggError, match="too many nodes dropped"):
        Round(vectors(5, seed=3), p).run(drop_after_collect={1, 2})


def test_the_server_never_holds_an_unmasked_node_vector():
    """What the server receives per node is uniform noise modulo 2^32 (Kolmogorov-Smirnov) and
    uncorrelated with the node's quantised vector; only the unmasked sum equals the plain sum."""
    p = P(5)
    xs = vectors(5, size=20_000, seed=4)
    r = Round(xs, p)
    total, _ = r.run()
    for u, y in r.seen.items():
        q = quantise(xs[u], p.clip, p.bits)
        assert stats.kstest(y / MOD, "uniform").pvalue > 1e-4, u
        assert abs(np.corrcoef(y.astype(np.float64), q.astype(np.float64))[0, 1]) < 0.05, u
    assert np.abs(total - sum(xs.values())).max() < bound(5, p)


def test_unmasking_reveals_one_secret_per_node_never_both():
    p = P(5)
    r = Round(vectors(5), p).setup().share().collect(skip={4})
    active = r.srv.survivors()
    out = node.unmask(r.st[1], active, {})
    assert set(out) == {1, 2, 3, 5, 4}      # seeds of 1, 2, 3, 5; node 4's first key (it dropped)
    assert {len(s) for v, s in out.items() if v != 4} == {node.B_SHARE} and len(out[4]) == node.SK_SHARE


# ------------------------------------------------------------------ hostile: parameters
def test_a_node_refuses_parameters_that_cannot_protect_it():
    with pytest.raises(SecAggError, match="overflows"):
        P(300, bits=24)
    with pytest.raises(SecAggError, match="expected >= 2"):
        P(5, t=1)
    with pytest.raises(SecAggError, match="more than half"):    # two groups of 2 could rebuild both secrets
        P(5, t=2)
    with pytest.raises(SecAggError, match="exceeds the 5 nodes"):
        P(5, t=6)
    assert hood_size(10, 4) == 5 and P(10, k=4).threshold == 3


def test_stages_run_in_order_once_each():
    p = P(3)
    r = Round(vectors(3), p).setup()
    with pytest.raises(SecAggError, match="'collect' arrived in stage 'setup'"):
        node.collect(r.st[1], r.xs[1], {})
    r.share().collect()
    with pytest.raises(SecAggError, match="'collect' arrived in stage 'masked'"):   # one masked vector per round
        node.collect(r.st[1], r.xs[1], r.srv.ciphertexts_for(1))
    node.unmask(r.st[1], r.srv.survivors(), {})
    with pytest.raises(SecAggError, match="arrived in stage 'unmasked'"):           # one unmasking per round
        node.unmask(r.st[1], [1, 2], {})


# ----------------------------------------------------------------- hostile: nodes
def test_the_server_refuses_a_second_masked_vector_and_one_from_a_node_that_did_not_share():
    p = P(3)
    r = Round(vectors(3), p).setup().share(skip={3}).collect()
    with pytest.raises(SecAggError, match="second masked vector"):
        r.srv.add_masked(1, r.seen[1], r.seen[1].size)
    with pytest.raises(SecAggError, match="did not complete key sharing"):
        r.srv.add_masked(3, r.seen[1], r.seen[1].size)


def test_an_incomplete_or_foreign_share_set_is_refused():
    p = P(4)
    r = Round(vectors(4), p).setup()
    cts, commit = node.share_keys(r.st[1], {v: e.wire() for v, e in r.srv.keys_for(1).items()}, None)
    with pytest.raises(SecAggError, match="expected one for each of its keyed neighbours"):
        r.srv.add_shares(1, {v: c for v, c in cts.items() if v != 2}, commit)
    with pytest.raises(SecAggError, match="expected one for each"):
        r.srv.add_shares(1, {**cts, 9: cts[2]}, commit)


@pytest.mark.parametrize("bad", [b"", b"\x04" + b"\0" * 96, "text", 7, b"x" * 10_000],
                         ids=["empty", "not-a-point", "str", "int", "huge"])
def test_a_malformed_public_key_excludes_only_its_node(bad):
    p = P(4)
    srv = ServerRound(p, [1, 2, 3, 4], RUN, RND, PHASE, seed=0)
    sk, pk = key_pair()
    with pytest.raises(SecAggError, match="node 1's pk1"):
        srv.add_keys(1, KeyEntry(bad, pk))
    srv.add_keys(2, KeyEntry(*key_pair()[1:], *key_pair()[1:]))   # the others go on
    assert set(srv.keys) == {2}


def test_a_corrupted_share_is_outvoted_and_its_holder_named():
    """Node 2 returns garbage for node 1's seed; the other four shares rebuild it (checked
    against node 1's commitment): the exact sum, node 2 named."""
    p = P(5)
    xs = vectors(5, seed=5)
    r = Round(xs, p).setup().share().collect().confirm()
    shares = r.unmask()
    shares[2][1] = shares[2][1][:4] + bytes(48)          # right index, wrong value
    total, n = r.srv.finish(shares)
    assert n == 5 and np.abs(total - sum(xs.values())).max() < bound(5, p)
    assert r.srv.bad_holders == {2}


def test_with_too_few_good_shares_the_round_fails_never_a_wrong_sum():
    p = P(5, t=5)
    r = Round(vectors(5, seed=6), p).setup().share().collect().confirm()
    shares = r.unmask()
    shares[3][2] = shares[3][2][:4] + bytes(48)
    with pytest.raises(SecAggError, match="no 5 of its 5 shares rebuild the secret it committed to"):
        r.srv.finish(shares)


def test_a_vector_outside_its_range_fails_the_round():
    """A hostile node masks garbage instead of a quantised vector: the unmasked sum leaves the
    range of n quantised vectors and the round fails instead of returning it."""
    p = P(4, bits=16)
    r = Round(vectors(4, seed=8), p).setup().share()
    for u in (1, 2, 3):
        y = node.collect(r.st[u], r.xs[u], r.srv.ciphertexts_for(u))
        r.srv.add_masked(u, y, y.size)
    node.collect(r.st[4], r.xs[4], r.srv.ciphertexts_for(4))
    r.srv.add_masked(4, np.random.default_rng(0).integers(0, MOD, 500, dtype=np.int64), 500)
    with pytest.raises(SecAggError, match="outside the range"):
        r.srv.finish(r.unmask())


# ----------------------------------------------------------------- hostile: the server
def test_the_masking_graph_is_fresh_each_round():
    p = P(12, k=4)
    graphs = {tuple(sorted((u, tuple(sorted(v))) for u, v in ServerRound(p, list(range(1, 13)), RUN, r, PHASE)
                              .graph.items())) for r in (1, 1, 1, 2)}
    assert len(graphs) > 1   # not a function of (config seed, round): the server draws it


def _try_to_recover(r: Round, u: int, got: dict[int, dict[int, bytes]]) -> bool:
    """The attacker's last step: with t shares of ``b_u`` and of every neighbour's first key, unmask
    ``y_u`` alone; True when it yields ``u``'s quantised vector."""
    p = r.p
    by_owner: dict[int, list[bytes]] = {}
    for holder, shares in got.items():
        for owner, s in shares.items():
            by_owner.setdefault(owner, []).append(s)
    b = [s for s in by_owner.get(u, []) if len(s) == node.B_SHARE]
    if len(b) < p.threshold:
        return False
    seed = next((s for c in itertools.combinations(b, p.threshold) if commitment(s := combine_shares(list(c)))
                 == r.srv.commits[u]), None)
    if seed is None:
        return False
    y = r.seen[u] - prg(seed, r.seen[u].size)
    for v in r.srv.graph[u]:
        sk = [s for s in by_owner.get(v, []) if len(s) == node.SK_SHARE]
        key = next((k for c in itertools.combinations(sk, p.threshold)
                    if public_of(k := combine_shares(list(c))) == r.srv.keys[v].pk1), None)
        if key is None:
            return False
        m = prg(shared_key(key, r.srv.keys[u].pk1, node.MASK_LABEL), y.size)
        y = y - m if u > v else y + m
    q = quantise(r.xs[u], p.clip, p.bits)
    return bool(np.abs(np.mod(y, MOD) - q).max() <= 1)


def test_the_attackers_recovery_works_when_it_holds_both_secrets():
    """The check of the two attack tests is not vacuous: handed every share the nodes hold (both
    secrets of every node), it does rebuild node 1's vector."""
    r = Round(vectors(5, seed=9), P(5)).setup().share().collect()
    everything = {w: {**{v: s for v, s in r.st[w].b_shares.items()}} for w in range(1, 6)}
    for w in range(1, 6):
        everything[10 + w] = dict(r.st[w].sk1_shares)
    assert _try_to_recover(r, 1, everything)


def test_a_server_lying_about_dropouts_recovers_nothing(signed5):
    """Finding 8. The server tells each node a survivor set of its own making (node 1, the target,
    alive; the node asked; the others shuffled out) so that some reveal node 1's seed and others
    its neighbours' first keys. Unsigned nodes check the set (no repeats, themselves in it, at least
    t neighbours) and answer too little; signed nodes answer only for a set that t of their
    neighbours signed, which no tailored set has: the attacker never rebuilds node 1's vector."""
    for signed in (False, True):
        signers, trusted = signed5 if signed else ({}, None)
        r = Round(vectors(5, seed=9), P(5), signers, trusted).setup().share().collect()
        got: dict[int, dict[int, bytes]] = {}
        refused = 0
        for w in range(1, 6):
            tailored = sorted({1, w, 1 + (w % 5) + (1 if w % 5 == 0 else 0)})
            for attempt in ([1, 1, 1, w], tailored):
                try:
                    sig = node.confirm(r.st[w], attempt, signers.get(w)) if signed else b""
                    got[w] = node.unmask(r.st[w], attempt, {w: sig} if signed else {})
                    break
                except SecAggError:
                    refused += 1
        assert not _try_to_recover(r, 1, got)
        assert refused >= (10 if signed else 5)


def test_a_server_substituting_keys_reads_no_share(signed5, tmp_path):
    """Finding 9. The server hands node 1 its own key pair in place of node 2's. An unsigned node
    encrypts node 2's shares for the server, which reads them; a signed node refuses the key (its
    signer is not trusted, or the signature does not verify)."""
    signers, trusted = signed5
    evil_sk, evil_pk = key_pair()
    for signed in (False, True):
        r = Round(vectors(5), P(5), signers if signed else {}, trusted if signed else None).setup()
        entries = {v: e.wire() for v, e in r.srv.keys_for(1).items()}
        entries[2] = {**entries[2], "pk2": evil_pk}
        if not signed:
            cts, _ = node.share_keys(r.st[1], entries, None)
            key = shared_key(evil_sk, r.st[1].pk2, node.SHARE_LABEL)
            assert open_sealed(key, cts[2], node.share_binding(RUN, RND, PHASE, 1, 2), "read")   # the attack works
            continue
        with pytest.raises(SecAggError, match="signature does not verify"):
            node.share_keys(r.st[1], entries, trusted, signers[1].public)
        evil = node_keys(tmp_path / "evil", 1)[0][0]     # a key of its own, signing its substituted keys
        forged = identity.Signer(evil)
        entries[2] = {**entries[2], "signer": forged.public,
                      "sig": forged.sign(identity.keys_statement(RUN, RND, PHASE, 2, entries[2]["pk1"], evil_pk))}
        with pytest.raises(SecAggError, match="does not trust"):
            node.share_keys(r.st[1], entries, trusted, signers[1].public)


def test_a_replayed_or_duplicated_signer_is_refused(signed5):
    signers, trusted = signed5
    r = Round(vectors(5), P(5), signers, trusted).setup()
    e1 = r.srv.keys[1]
    srv = ServerRound(r.p, [1, 2, 3, 4, 5], RUN, RND, PHASE, seed=0)
    with pytest.raises(SecAggError, match="signature does not verify"):   # node 1's signed keys claimed as id 2
        srv.add_keys(2, e1)
    srv.add_keys(1, e1)
    sk, pk = key_pair()
    _, pk2 = key_pair()
    dup = KeyEntry(pk, pk2, signers[1].public, signers[1].sign(identity.keys_statement(RUN, RND, PHASE, 3, pk, pk2)))
    with pytest.raises(SecAggError, match="already signed another SecAgg id"):
        srv.add_keys(3, dup)
