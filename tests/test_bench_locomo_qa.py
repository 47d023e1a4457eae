"""``bench/locomo_qa.py``: LoCoMo's answer scoring reproduced (its normalisation, Porter
stemming, the per-category rules), the seeded stratified sample, and one small run of all
three arms through real daemons against the scripted llama-server: the oracle arm's
``### recalled`` holds exactly the gold evidence, the none arm's no note at all."""

from __future__ import annotations

import argparse
import json

import pytest

from bench import locomo_qa
from bench.locomo_answers import (
    abstained,
    contained,
    f1_score,
    locomo_abstained,
    multi_f1,
    normalize_answer,
    score_answer,
)
from tests.fakes.llama_server import open_fake_llama


def test_normalisation_and_token_f1_follow_locomos_evaluation():
    assert normalize_answer("The Cat, and a dog!") == "cat dog"
    assert f1_score("7 May 2023", "7 May 2023") == 1.0
    # stemmed: "paintings" and "painting" are one token
    assert f1_score("She likes paintings", "painting") == pytest.approx(2 * (1 / 3) / (1 / 3 + 1))
    assert f1_score("no overlap here", "7 May 2023") == 0.0
    assert f1_score("", "x") == 0.0
    # multi-hop: each gold part scored by its best reply part
    assert multi_f1("pottery, camping", "camping, pottery, painting") == pytest.approx(2 / 3)


def test_category_rules_and_the_lenient_readings():
    assert score_answer("It was on 7 May 2023.", "7 May 2023", 2) == {
        "f1": pytest.approx(2 * 0.5 * 1 / 1.5), "contained": True}  # 3 of 6 reply tokens
    # open-domain: only the gold's first ';' part counts
    assert score_answer("Psychology", "Psychology; counseling", 3)["f1"] == 1.0
    assert score_answer("Not mentioned in the conversation", "x", 5) == {
        "f1": 1.0, "abstained": True}
    assert score_answer("I don't know that", "x", 5) == {"f1": 0.0, "abstained": True}
    assert score_answer("She went to Paris", "x", 5) == {"f1": 0.0, "abstained": False}
    assert locomo_abstained("No information available.") and not locomo_abstained("Paris")
    assert abstained("I don\u2019t have that") and not abstained("Paris in May")
    assert contained("Caroline went there on 7 May 2023", "7 May 2023")
    assert not contained("in May", "7 May 2023") and not contained("anything", "the")


def _conversations() -> list[dict]:
    turns = [("Caroline", "I went to a support group yesterday."),
             ("Melanie", "That is great! I painted a lake sunrise last week."),
             ("Caroline", "I am thinking about counseling as a career."),
             ("Melanie", "My kids love camping and pottery.")]
    conv = {"sample_id": "conv-x", "conversation": {
        "speaker_a": "Caroline", "speaker_b": "Melanie",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": s, "dia_id": f"D1:{i}", "text": t}
                      for i, (s, t) in enumerate(turns, 1)]},
        "qa": [
            {"question": "What did Melanie paint?", "answer": "a lake sunrise",
             "evidence": ["D1:2"], "category": 4},
            {"question": "When did Caroline go to the support group?", "answer": "7 May 2023",
             "evidence": ["D1:1"], "category": 2},
            {"question": "What career is Caroline considering?", "answer": "counseling",
             "evidence": ["D1:3"], "category": 3},
            {"question": "What do Melanie's kids like?", "answer": "camping, pottery",
             "evidence": ["D1:4"], "category": 1},
            {"question": "What did Caroline paint?", "adversarial_answer": "a lake sunrise",
             "evidence": ["D1:2"], "category": 5},
        ]}
    return [conv]


def test_the_sample_is_seeded_stratified_and_deals_from_every_conversation():
    convs = [json.loads(json.dumps(c)) for c in _conversations() * 3]
    for i, c in enumerate(convs):
        c["sample_id"] = f"conv-{i}"
    one = locomo_qa.sample_questions(convs, 2, seed=3)
    assert locomo_qa.sample_questions(convs, 2, seed=3) == one
    assert [q["category"] for q in one] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert len({q["sample"] for q in one if q["category"] == 2}) == 2  # dealt round-robin
    every = locomo_qa.sample_questions(convs, None, seed=3)
    assert len(every) == 15 and every[-1]["gold"] == "a lake sunrise"  # adversarial answer


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_three_arms_through_real_daemons_on_the_scripted_model(tmp_path):
    data = tmp_path / "conv.json"
    data.write_text(json.dumps(_conversations()))
    rules = [{"grammar_contains": "reply", "response": '{"reply": "a lake sunrise, 7 May 2023"}'}]
    async with open_fake_llama(tmp_path, rules) as fake:
        out = await locomo_qa.measure(argparse.Namespace(
            data=data, full=True, per_category=1, seed=1, llm_url=fake.url))
    runs = out["runs"]
    assert out["questions"] == 5 and all(len(runs[a]) == 5 for a in locomo_qa.ARMS)
    by = {a: {r["category"]: r for r in rows} for a, rows in runs.items()}
    assert by["recall"][4]["f1"] == pytest.approx(2 * 0.4 / 1.4)  # 2 of 5 reply tokens
    assert by["oracle"][4]["evidence_shown"] and not by["none"][4]["evidence_shown"]
    assert all(r["reason"] == "reply" for rows in runs.values() for r in rows)
    text = locomo_qa.render(out, "python -m bench.locomo_qa --full")
    assert "| all (1-4) | 4 |" in text and "recall / oracle" in text
    assert "Category 5 (adversarial, 1 questions" in text


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_locomo_ops_stores_through_the_websocket_and_recalls_the_evidence(tmp_path):
    """``bench/locomo_ops.py`` on two tiny conversations: every turn stored with
    ``memory.notes.store`` and found again with ``memory.notes.recall`` in its own
    conversation's directory (the other conversation's identical question never
    answers), keyword and hybrid, through the daemon and in process."""
    from bench import locomo_ops

    convs = [json.loads(json.dumps(c)) for c in _conversations() * 2]
    convs[1]["sample_id"] = "conv-y"
    convs[1]["conversation"]["session_1"][1]["text"] = "I sculpted a heron in clay."
    convs[1]["qa"] = [{"question": "What did Melanie sculpt?", "answer": "a heron",
                       "evidence": ["D1:2"], "category": 4}]
    out = await locomo_ops.measure(convs)
    assert out == {"keyword_ops": 1.0, "hybrid_ops": 1.0, "keyword_in_process": 1.0,
                   "hybrid_in_process": 1.0, "keyword_shared_batch": 1.0,
                   "keyword_shared_none": 1.0,
                   "engines": {"sqlite": {"keyword": 1.0, "hybrid": 1.0}}}
    text = locomo_ops.render(out, "python -m bench.locomo_ops", 2)
    assert "| keyword | 100.0 % | 100.0 % | ≥ 74 % | PASS |" in text
    assert "| hybrid | 100.0 % | 100.0 % | ≥ keyword + 2 | FAIL |" in text
    assert "each store engine" not in text  # one engine: no side-by-side table
    both = locomo_ops.render({**out, "engines": {"sqlite": {"keyword": 0.70, "hybrid": 0.72},
                                                 "postgres": {"keyword": 0.70,
                                                              "hybrid": 0.705}}},
                             "python -m bench.locomo_ops --engine both", 2)
    assert "| keyword | 70.0 % | 70.0 % | +0.0 | within 1 point | PASS |" in both
    assert "| hybrid | 72.0 % | 70.5 % | -1.5 | within 1 point | FAIL |" in both


def test_the_second_stage_keeps_the_models_picks_first_and_ignores_what_is_not_a_candidate():
    from bench.locomo_rerank import grammar, parse_choice, prompt, reorder

    assert parse_choice("[2, 0, 2, 7]", 3) == [2, 0]  # once each, only candidates
    assert parse_choice("not json", 3) == [] and parse_choice('{"a": 1}', 3) == []
    assert reorder([10, 11, 12, 13], [2, 0]) == [12, 10, 11, 13]
    assert grammar(3).splitlines()[1] == 'num ::= "0" | "1" | "2"'
    messages = prompt("What did Melanie paint?", ["Melanie: a lake sunrise " * 20], 30)
    assert messages[1]["content"].endswith("[0] " + ("Melanie: a lake sunrise " * 20)[:30])
