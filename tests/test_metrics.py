"""Each metric and each paper-compatible switch against hand-computed examples."""

import math

import numpy as np
import pytest

from corolla import metrics as M


def test_full_rank_hand_example():
    # 6 items; scores give the ranking 5,3,1,0,2,4 ; truth {3, 0, 4}
    s = np.array([[0.3, 0.5, 0.1, 0.8, 0.0, 0.9]])
    m = M.full_rank_user_metrics(s, [np.array([3, 0, 4])], [2, 4])
    # K=2: top [5,3] -> 1 hit at rank 2
    assert m["hr@2"][0] == 1.0
    assert m["precision@2"][0] == pytest.approx(1 / 2)
    assert m["recall@2"][0] == pytest.approx(1 / 3)
    assert m["f1@2"][0] == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))
    assert m["mrr@2"][0] == pytest.approx(1 / 2)
    assert m["ndcg@2"][0] == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    # K=4: top [5,3,1,0] -> hits at ranks 2 and 4; IDCG over min(3,4)=3 positions
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert m["ndcg@4"][0] == pytest.approx((1 / math.log2(3) + 1 / math.log2(5)) / idcg)
    assert m["precision@4"][0] == pytest.approx(0.5)
    assert m["recall@4"][0] == pytest.approx(2 / 3)


def test_full_rank_no_hit_and_ties_to_smaller_id():
    s = np.array([[1.0, 1.0, 1.0]])
    assert M.top_k(s, 2).tolist() == [[0, 1]]
    m = M.full_rank_user_metrics(s, [np.array([2])], [2])
    assert m["hr@2"][0] == 0 and m["mrr@2"][0] == 0 and m["ndcg@2"][0] == 0 and m["f1@2"][0] == 0


def test_fedcia_set_order_and_f1_of_means():
    # top in rank order [40, 3, 35]: a Python set iterates small ints by hash slot -> [3, 35, 40]
    # (8-slot table: 40 % 8 = 0, 3 % 8 = 3, 35 % 8 = 3 -> probes to another slot)
    top = [40, 3, 35]
    order = list(set(top))
    truth = {40}
    mrr, ndcg = M.fedcia_set_order(top, truth)
    pos = order.index(40)
    assert mrr == pytest.approx(1 / (pos + 1))
    # hits-only IDCG: one hit -> IDCG = 1, so NDCG = 1/log2(pos+2)
    assert ndcg == pytest.approx((1 / math.log2(pos + 2)) / (1 + 1e-20))
    # rank-order MRR would be 1 (40 is ranked first); the set order loses that
    assert order != top
    # no hit: FedCIA's 1/1e20 and 0
    assert M.fedcia_set_order([1, 2], {9}) == (pytest.approx(1e-20), 0.0)


def test_aggregate_compat_f1_is_f1_of_means():
    s = np.array([[0.9, 0.8, 0.1, 0.0], [0.9, 0.8, 0.1, 0.0]])
    truth = [np.array([0]), np.array([1, 2, 3])]
    pu = M.full_rank_user_metrics(s, truth, [2], fedcia=True)
    mets, compat = M.aggregate(pu, [2])
    p = (0.5 + 0.5) / 2
    r = (1.0 + 1 / 3) / 2
    assert compat["f1@2"] == pytest.approx(2 * p * r / (p + r))  # 0.5714
    assert mets["f1@2"] == pytest.approx((2 * 0.5 * 1 / 1.5 + 2 * 0.5 * (1 / 3) / (0.5 + 1 / 3)) / 2)  # 0.5333
    assert compat["f1@2"] != pytest.approx(mets["f1@2"])


def test_loo_hand_example_and_ties():
    pos = np.array([0.7, 0.5])
    neg = np.array([[0.9, 0.1, 0.2], [0.5, 0.5, 0.9]])
    m = M.loo_user_metrics(pos, neg, [1, 3])
    # user 0: rank 2 exactly
    assert m["hr@1"][0] == 0 and m["hr@3"][0] == 1
    assert m["ndcg@3"][0] == pytest.approx(1 / math.log2(3))
    assert m["mrr@3"][0] == pytest.approx(0.5)
    # user 1: one better, two tied -> rank uniform on {2,3,4}
    assert m["hr@3"][1] == pytest.approx(2 / 3)
    assert m["ndcg@3"][1] == pytest.approx((1 / math.log2(3) + 1 / math.log2(4)) / 3)
    # ties against the positive: rank 4
    t = M.loo_user_metrics(pos, neg, [3], ties_against_positive=True)
    assert t["hr@3"][1] == 0 and t["ndcg@3"][1] == 0
    assert t["hr@3"][0] == 1


def test_top_k_of_wide_rows_equals_sorting_the_whole_row():
    """``top_k``'s partition path (rows wider than 8 k) gives the full sort's indices, ties to the
    smaller index, -inf (masked items) and rows with fewer than k finite scores included."""
    from corolla.metrics import top_k

    def full_sort(s, k):
        return np.lexsort((np.broadcast_to(np.arange(s.shape[1]), s.shape), -s), axis=-1)[:, :min(k, s.shape[1])]

    g = np.random.default_rng(0)
    for _ in range(400):
        n, rows, k = int(g.integers(1, 500)), int(g.integers(1, 6)), int(g.integers(1, 30))
        s = g.integers(0, int(g.integers(1, 10)), (rows, n)).astype(float)   # many ties
        if g.random() < 0.4:
            s[g.random((rows, n)) < g.random()] = -np.inf
        np.testing.assert_array_equal(top_k(s, k), full_sort(s, k))
    s = np.full((2, 100), -np.inf)
    s[0, 7] = 1.0
    np.testing.assert_array_equal(top_k(s, 3), [[7, 0, 1], [0, 1, 2]])


def test_sigmoid_ranking_ties_saturated_scores_as_fedcias_code():
    import torch

    from client_app.base import full_rank_metrics
    from tests.test_oneuser_fullrank import tiny_federation

    x = np.array([-40.0, 0.0, 16.6, 16.7, 17.0, 30.0])
    np.testing.assert_array_equal(M.sigmoid_f32(x), torch.sigmoid(torch.tensor(x, dtype=torch.float32)).double().numpy())
    assert M.sigmoid_f32(x)[2] < 1.0 and (M.sigmoid_f32(x)[3:] == 1.0).all()      # 16.7 and up round to 1
    fed = tiny_federation()                          # 15 items; user 0: train 1 6 9 14, valid 2 3, test 0 5
    assert fed.rows("test", 0).tolist() == [0, 5]
    s = np.full((1, fed.n_items), -5.0)
    s[0, [5, 4, 7]] = [40.0, 20.0, 18.0]             # the hit 5 best by its score; misses 4 and 7 tie with it by sigmoid
    plain = full_rank_metrics(s.copy(), fed, [0], "test", [1], False)
    tied = full_rank_metrics(s.copy(), fed, [0], "test", [1], False, sigmoid32=True)
    assert plain["hr@1"][0] == 1.0
    assert tied["hr@1"][0] == 0.0                    # 4, 5, 7 tie at 1.0: the smallest id, 4, is first
