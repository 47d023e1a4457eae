"""The ``memory.*`` configuration computed once into plans, and the agent's tools among the ops.

A disabled channel must read as 0 (or None) in the plan it belongs to — the code that
builds and renders a turn's context never reads an ``enabled`` switch — and every memory
op has exactly one handler.
"""

from __future__ import annotations

import msgspec
import pytest

from actors.memory.ops import OPS, TOOL_NAMES
from actors.store.plans import RecallPlan, RenderBudget
from runtime.services.config import MemoryConfig


def memory(**blocks: object) -> MemoryConfig:
    return msgspec.convert(blocks, MemoryConfig)


def test_the_default_configuration_fetches_and_shows_every_enabled_channel() -> None:
    m = memory()
    plan, budget = RecallPlan.from_config(m), RenderBudget.from_config(m)
    assert plan.k == m.recall_injection.k > 0
    assert plan.index_limit == m.index.limit > 0
    assert plan.lessons_k == m.lessons.recall_k and plan.procedures_k == m.procedures.recall_k
    assert budget.profile_max_tokens == m.profile.max_tokens > 0
    assert budget.recall_max_tokens == m.recall_injection.max_tokens
    assert budget.focus_items == m.recall_injection.focus_items


@pytest.mark.parametrize(("block", "plan_zero", "budget_zero"), [
    ("recallInjection", {"k": 0}, {}),
    ("index", {"index_limit": 0}, {}),
    ("links", {"max_expanded": 0}, {}),
    ("lessons", {"lessons_k": 0}, {"lessons_max_tokens": 0}),
    ("procedures", {"procedures_k": 0}, {"procedures_max_tokens": 0}),
    ("sessionFacts", {"session_facts_limit": 0}, {"session_facts_max_tokens": 0}),
    ("profile", {"session_facts_limit": 0, "profile_history": False},
     {"profile_max_tokens": 0, "session_facts_max_tokens": 0}),
])
def test_a_disabled_channel_is_zero_in_the_plans(block: str, plan_zero: dict,
                                                 budget_zero: dict) -> None:
    m = memory(**{block: {"enabled": False}, "links": {"enabled": block != "links",
                                                       "maxExpanded": 4},
                  "profile": {"enabled": block != "profile", "showDates": True}})
    plan, budget = RecallPlan.from_config(m), RenderBudget.from_config(m)
    for name, value in plan_zero.items():
        assert getattr(plan, name) == value, name
    for name, value in budget_zero.items():
        assert getattr(budget, name) == value, name
    if block != "links":
        assert plan.max_expanded == 4


def test_voting_reorders_and_filters_only_when_on() -> None:
    off = RecallPlan.from_config(memory())
    assert off.score_blend is None and off.profile_vote_floor is None
    on = RecallPlan.from_config(memory(voting={"enabled": True,
                                               "profileFilterThreshold": 3}))
    assert on.score_blend is not None and on.profile_vote_floor == -3


def test_links_by_meaning_are_skipped_unless_asked_for() -> None:
    assert RecallPlan.from_config(memory()).skip_link_origins == ("similarity",)
    assert RecallPlan.from_config(memory(links={"expandByMeaning": True})).skip_link_origins == ()


def test_the_tools_are_ops() -> None:
    assert set(TOOL_NAMES) <= set(OPS)
