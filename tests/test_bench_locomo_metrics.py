"""The retrieval metrics bench.locomo reports beside evidence recall."""

from __future__ import annotations

import math

import pytest

from bench.locomo_metrics import miss_kinds, ndcg, session_metrics

SESSION = {1: "a", 2: "a", 3: "a", 4: "a", 5: "a", 6: "b", 7: "b", 8: "c", 9: None}


def test_missed_turns_are_near_only_within_two_turns_of_a_hit_of_their_session():
    # Hits 1 (session a) and 7 (session b). Missed: 3 is two turns from hit 1 (near); 5 is
    # four away (far); 6 is next to hit 7 in session b (near); 8 is next to hit 7 but in
    # session c (far); 9 has no session (far). 1 was returned, so it is not missed.
    assert miss_kinds({1, 3, 5, 6, 8, 9}, [1, 7], SESSION) == (2, 3)
    assert miss_kinds({1}, [1], SESSION) == (0, 0)
    assert miss_kinds({4}, [], SESSION) == (0, 1)


def test_ndcg_is_one_for_the_ideal_order_and_counts_duplicates_once():
    assert ndcg(["x", "y", "z"], {"x", "y"}) == 1.0
    assert ndcg(["z", "x"], {"x"}) == pytest.approx(1 / math.log2(3))
    assert ndcg(["z", "z", "x"], {"x"}) == pytest.approx(1 / math.log2(3))
    assert ndcg(["z"] * 3, set()) == 0.0
    assert ndcg(["a", "b", "x"], {"x"}, k=2) == 0.0


def test_session_metrics_rank_sessions_by_first_appearance():
    # ranked notes 6 (b), 7 (b), 1 (a), 8 (c): sessions b, a, c
    got = session_metrics([6, 7, 1, 8], {2, 8}, SESSION)  # relevant sessions a and c
    assert got["any@1"] == 0.0 and got["all@1"] == 0.0
    assert got["any@3"] == 1.0 and got["all@3"] == 1.0
    ideal = 1 + 1 / math.log2(3)
    assert got["ndcg@10"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(4)) / ideal)
    assert session_metrics([], {1}, SESSION)["any@5"] == 0.0
