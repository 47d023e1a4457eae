"""Links between notes: validation, BFS expansion, the per-turn context and ops
.

Rules: plain sync tests on the ``conn`` fixture (a migrated ``memory.sqlite`` under
``tmp_path``). Edge order depends on weight then ``created_at``, so tests that pin an
order pass ``now_ms`` or distinct weights. Ops go through ``tools.run_op``.
"""

from __future__ import annotations

import math

import msgspec
import pytest

from actors.memory.router import OpCall, run_op
from actors.store.context import RecallPlan, RenderBudget, TurnScope, build_context
from actors.store.tail import render_context
from actors.store.errors import NotFound, ValidationError
from actors.store.links import LINK_KINDS, Link, LinkStore, clamp_weight
from actors.store.notes import MemoryStore
from actors.store.profile import ProfileStore
from actors.store.render import estimate_tokens
from actors.store.stores import StoreSet
from runtime.services.config import MemoryConfig


@pytest.fixture
def conn(engine_conn):
    """Every test here runs on each engine (SQLite, PostgreSQL)."""
    return engine_conn


@pytest.fixture
def notes(conn):
    return MemoryStore(conn)


@pytest.fixture
def links(conn):
    return LinkStore(conn)


def make(notes, n, prefix="note"):
    return [notes.store(f"{prefix} number {i} body").id for i in range(n)]


def recall_counts(conn) -> dict[int, int]:
    return dict(conn.execute("SELECT id, recall_count FROM memories").fetchall())


# -- validation ------------------------------------------------------------


def test_add_and_upsert(notes, links):
    a, b = make(notes, 2)
    link = links.add(a, b, "relates_to", 0.4, now_ms=10)
    assert link == Link(a, b, "RELATES_TO", 0.4, 10)
    again = links.add(a, b, "RELATES_TO", 0.9, now_ms=20)
    assert again == Link(a, b, "RELATES_TO", 0.9, 20)
    assert links.count() == 1
    other = links.add(a, b, "CAUSED_BY")  # several kinds per pair
    assert other.weight == 1.0 and links.count() == 2
    assert links.get(a, b, "caused_by") == other
    assert links.get(b, a, "CAUSED_BY") is None
    assert msgspec.to_builtins(link) == {"fromId": a, "toId": b, "kind": "RELATES_TO",
                                         "weight": 0.4, "createdAt": 10, "origin": "manual"}


def test_origin_manual_wins_and_expansion_can_skip_links_by_meaning(notes, links):
    a, b, c = make(notes, 3)
    assert links.add(a, b, weight=0.6, origin="similarity").origin == "similarity"
    assert links.add(a, b, weight=0.7, origin="model").origin == "model"
    assert links.add(a, b).origin == "manual"  # a person's link stays theirs
    assert links.add(a, b, weight=0.5, origin="similarity").origin == "manual"
    links.add(a, c, weight=0.55, origin="similarity")
    assert links.expand([a]) == [c, b]  # (weight order: 0.55, then 0.5)
    assert links.expand([a], skip_origins=("similarity",)) == [b]
    with pytest.raises(ValidationError) as err:
        links.add(a, c, origin="guess")
    assert err.value.field == "origin"


def test_context_leaves_links_by_meaning_out_unless_asked(conn, notes, links):
    hit = notes.store("the staging database runs postgres").id
    near = notes.store("backups at midnight").id
    typed = notes.store("the backup bucket is in eu-west").id
    links.add(hit, near, weight=0.6, origin="similarity")
    links.add(hit, typed, "REFERENCES")
    ctx = context(conn, links, "postgres", max_expanded=12,
                  skip_link_origins=("similarity",))
    assert [n.id for n in ctx.recalled] == [hit, typed]
    ctx = context(conn, links, "postgres", max_expanded=12)
    assert [n.id for n in ctx.recalled] == [hit, typed, near]


@pytest.mark.parametrize("from_id, to_id, kind, field", [
    (1, 1, "RELATES_TO", "toId"),
    (0, 2, "RELATES_TO", "fromId"),
    (1, -2, "RELATES_TO", "toId"),
    (True, 2, "RELATES_TO", "fromId"),
    (1, 2, "LIKES", "kind"),
    (1, 2, None, "kind"),
])
def test_add_validation(notes, links, from_id, to_id, kind, field):
    make(notes, 2)
    with pytest.raises(ValidationError) as exc:
        links.add(from_id, to_id, kind)
    assert exc.value.field == field
    assert links.count() == 0


def test_add_to_missing_note_is_not_found(notes, links):
    (a,) = make(notes, 1)
    with pytest.raises(NotFound):
        links.add(a, 999)
    with pytest.raises(NotFound):
        links.add(999, a)


def test_weight_clamp():
    assert clamp_weight(None) == 1.0
    assert clamp_weight(-3) == 0.0 and clamp_weight(7.5) == 1.0 and clamp_weight(0.25) == 0.25
    assert clamp_weight(math.nan) == 1.0 and clamp_weight(math.inf) == 1.0
    with pytest.raises(ValidationError):
        clamp_weight("0.5")
    with pytest.raises(ValidationError):
        clamp_weight(True)


def test_every_kind_is_accepted(notes, links):
    a, b = make(notes, 2)
    for kind in LINK_KINDS:
        links.add(a, b, kind)
    assert links.count() == 6


def test_lists_order_remove_and_cascade(notes, links):
    a, b, c, d = make(notes, 4)
    links.add(a, b, weight=0.2, now_ms=1)
    links.add(a, c, weight=0.9, now_ms=1)
    links.add(a, d, weight=0.9, now_ms=5)
    links.add(d, a, "REFERENCES", now_ms=2)
    assert [e.to_id for e in links.list_outgoing(a)] == [d, c, b]
    assert [e.from_id for e in links.list_incoming(a)] == [d]
    assert links.list_outgoing(a, kinds=["REFERENCES"]) == []
    assert [(e.from_id, e.to_id) for e in links.list_all()][0] == (a, d)
    assert len(links.list_all(2)) == 2
    assert {(e.from_id, e.to_id) for e in links.list_all(note_id=d)} == {(a, d), (d, a)}
    assert links.remove(a, b, "RELATES_TO") is True
    assert links.remove(a, b, "RELATES_TO") is False
    notes.forget(c)  # ON DELETE CASCADE
    assert [e.to_id for e in links.list_outgoing(a)] == [d]
    assert links.remove_all_for(d) == 2 and links.count() == 0
    with pytest.raises(ValidationError):
        links.list_outgoing(a, kinds=["NOPE"])


# -- BFS expansion ------------------------------------------------------------


@pytest.fixture
def graph(notes, links):
    """1 -> 2 -> 4 -> 6, 1 -> 3 (lighter), 5 -> 1 (incoming), 4 -> 7.

    Ids are the note ids 1..7 of a fresh file.
    """
    ids = make(notes, 7)
    assert ids == list(range(1, 8))
    links.add(1, 2, weight=0.9)
    links.add(1, 3, weight=0.5)
    links.add(5, 1, "CAUSED_BY")
    links.add(2, 4)
    links.add(4, 6)
    links.add(4, 7, weight=0.1)
    return ids


def test_expand_depth_one_outgoing_then_incoming(links, graph):
    assert links.expand([1]) == [2, 3, 5]


def test_expand_depths_and_clamp(links, graph):
    assert links.expand([1], depth=2) == [2, 3, 5, 4]
    assert links.expand([1], depth=3) == [2, 3, 5, 4, 6, 7]
    assert links.expand([1], depth=9) == links.expand([1], depth=3)
    assert links.expand([1], depth=0) == links.expand([1], depth=1)


def test_expand_incoming_edges_are_walked(links, graph):
    assert links.expand([6]) == [4]
    assert links.expand([6], depth=2) == [4, 7, 2]  # from 4: outgoing 7, then incoming 2


def test_expand_cap_stops_mid_hop(links, graph):
    assert links.expand([1], max_expanded=2) == [2, 3]
    assert links.expand([1], depth=3, max_expanded=4) == [2, 3, 5, 4]
    assert links.expand([1], max_expanded=0) == [2]  # at least 1


def test_expand_excludes_seeds_and_duplicates(links, graph):
    out = links.expand([1, 2], depth=3)
    assert 1 not in out and 2 not in out
    assert len(out) == len(set(out))
    assert out == [3, 5, 4, 6, 7]
    assert links.expand([]) == []
    assert links.expand([1, 1]) == [2, 3, 5]


def test_expand_kind_filter_and_validation(links, graph):
    assert links.expand([1], kinds=["CAUSED_BY"]) == [5]
    with pytest.raises(ValidationError):
        links.expand([0])
    with pytest.raises(ValidationError):
        links.expand([1], kinds=["BOGUS"])


def test_expand_isolated_note(notes, links):
    (a,) = make(notes, 1)
    assert links.expand([a], depth=3) == []


# -- the per-turn context ------------------------------------------------------


def context(conn, links, message, working_dir=None, **plan):
    return build_context(StoreSet.of(ProfileStore(conn), MemoryStore(conn), links=links), message,
                         RecallPlan(**plan), TurnScope(working_dir=working_dir))


def test_context_appends_neighbours_once_without_duplicates(conn, notes, links):
    hit = notes.store("the staging database runs postgres").id
    hit2 = notes.store("staging deploys happen on friday").id
    near = notes.store("backups at midnight").id
    far = notes.store("the backup bucket is in eu-west").id
    other = notes.store("unrelated cooking note").id
    links.add(hit, near)
    links.add(hit2, hit)  # both hits linked to each other: no duplicate
    links.add(near, far)
    before = recall_counts(conn)
    ctx = context(conn, links, "staging", max_expanded=12, expansion_depth=1)
    ids = [n.id for n in ctx.recalled]
    assert sorted(ids[:2]) == sorted([hit, hit2]) and ids[2:] == [near]
    assert len(ids) == len(set(ids))
    after = recall_counts(conn)
    assert {i: after[i] - before[i] for i in before} == {
        hit: 1, hit2: 1, near: 1, far: 0, other: 0}
    # The index leaves out the hits only (expansion does not change it); a neighbour the
    # index shows is not repeated under ### recalled: each note once per prompt.
    assert {n.id for n in ctx.index} == {near, far, other}
    assert ctx.recalled[2].score is None and ctx.expanded == 1
    bodies = render_context(ctx)
    assert len(bodies["recalled"].splitlines()) == 2
    assert f"- #{near} backups at midnight" in bodies["memory-index"].splitlines()
    assert bodies["memory-index"] == render_context(context(conn, links, "staging",
                                                            max_expanded=0))["memory-index"]
    # With the index off, the neighbour is shown in ### recalled.
    body = render_context(ctx, RenderBudget(index_max_tokens=0))["recalled"]
    assert body.splitlines()[2] == f"- #{near} backups at midnight"


def test_expanded_neighbours_take_their_tokens_from_the_end_of_the_index(conn, notes, links):
    """The cold path's latency bar (replies with it on ≤ 1.05 × off): links never lengthen
    the tail, and never change the index but at its end (the index is the tail's first
    section: an LLM server's prompt cache covers it from one turn to the next only while
    it stays the same)."""
    hit = notes.store("the staging database runs postgres 16 on a dedicated host").id
    words = ("amber birch cedar delta ember fjord garnet harbor indigo juniper kelp lumen "
             "marble nectar onyx pepper quartz raven saffron tundra").split()
    stored = []
    for i in range(40):  # enough distinct newest notes to fill the index budget
        a, b = words[i % 20], words[(i * 7 + 3) % 20]
        stored.append(notes.store(f"{a} {i} {b} {a}{b} ledger {i * 31} of the {b} {a} archive").id)
    old, newest = stored[:6], stored[-20]  # (the index shows the newest 20, id order)
    for nid in old + [newest]:  # six old neighbours (not in the index) and one it shows
        links.add(hit, nid)
    plain = render_context(context(conn, links, "postgres", max_expanded=0))
    ctx = context(conn, links, "postgres", max_expanded=12)
    assert ctx.expanded == 7 and newest in {n.id for n in ctx.index}
    linked = render_context(ctx)
    shown = linked["recalled"].splitlines()
    assert len(shown) == 7 and not any(ln.startswith(f"- #{newest} ") for ln in shown)
    size = lambda bodies: sum(estimate_tokens(bodies[k]) for k in ("recalled", "memory-index"))
    assert size(linked) <= size(plain)
    # The index only loses rows at its end: its remaining whole rows are plain's first.
    rows = linked["memory-index"].splitlines()[:-2]  # (a cut row, then "… [truncated]")
    assert rows and plain["memory-index"].splitlines()[:len(rows)] == rows
    assert len(rows) < len(plain["memory-index"].splitlines()) - 1
    # Without neighbours nothing is taken from the index.
    assert render_context(context(conn, links, "zzz", max_expanded=12)).get(
        "memory-index") == render_context(context(conn, links, "zzz", max_expanded=0)).get(
        "memory-index")


def test_context_expansion_depth_and_cap(conn, notes, links):
    hit = notes.store("alpha topic").id
    chain = [notes.store(f"chain link {i}").id for i in range(4)]
    links.add(hit, chain[0])
    for x, y in zip(chain, chain[1:]):
        links.add(x, y)
    ctx = context(conn, links, "alpha", max_expanded=12, expansion_depth=2)
    assert [n.id for n in ctx.recalled] == [hit, chain[0], chain[1]]
    ctx = context(conn, links, "alpha", max_expanded=1, expansion_depth=3)
    assert [n.id for n in ctx.recalled] == [hit, chain[0]]


def test_context_links_disabled_or_no_hits(conn, notes, links):
    hit = notes.store("alpha topic").id
    near = notes.store("beta").id
    links.add(hit, near)
    assert [n.id for n in context(conn, links, "alpha", max_expanded=0).recalled] == [hit]
    plan = RecallPlan.from_config(msgspec.convert({"links": {"enabled": False}}, MemoryConfig))
    assert plan.max_expanded == 0  # links switched off in config expand nothing
    assert context(conn, links, "zzz", max_expanded=12).recalled == []


def test_context_expansion_respects_project_visibility(conn, notes, links):
    hit = notes.store("alpha topic").id
    mine = notes.store("mine", scope="project", working_dir="/a").id
    theirs = notes.store("theirs", scope="project", working_dir="/b").id
    links.add(hit, mine)
    links.add(hit, theirs)
    ctx = context(conn, links, "alpha", working_dir="/a", max_expanded=12)
    assert [n.id for n in ctx.recalled] == [hit, mine]


def test_context_expansion_failure_keeps_base_hits(conn, notes, links):
    hit = notes.store("alpha topic").id

    class Broken(LinkStore):
        def expand(self, *a, **kw):
            raise RuntimeError("boom")

    ctx = context(conn, Broken(conn), "alpha", max_expanded=12)
    assert [n.id for n in ctx.recalled] == [hit]


# -- ops through run_op --------------------------------------------------------------------------


def op(conn, name, args=None):
    return run_op(StoreSet.of(ProfileStore(conn), MemoryStore(conn)), name, args or {},
                  OpCall(source="user"))


def test_links_add_and_list_ops(conn, notes):
    a, b, c = make(notes, 3)
    assert op(conn, "memory.links.list") == ([], {})
    link, change = op(conn, "memory.links.add", {"fromId": a, "toId": b, "kind": "REFERENCES",
                                                 "weight": 2})
    assert link.weight == 1.0 and link.kind == "REFERENCES" and change == {"ids": [a, b]}
    op(conn, "memory.links.add", {"fromId": b, "toId": c, "kind": "RELATES_TO"})
    data, change = op(conn, "memory.links.list", {"limit": 10})
    assert len(data) == 2 and change == {}
    assert [(e.from_id, e.to_id) for e in op(conn, "memory.links.list", {"id": a})[0]] == [(a, b)]
    with pytest.raises(ValidationError) as exc:
        op(conn, "memory.links.add", {"fromId": a, "toId": a, "kind": "RELATES_TO"})
    assert exc.value.field == "toId"
    with pytest.raises(ValidationError) as exc:
        op(conn, "memory.links.add", {"fromId": a, "toId": b})
    assert exc.value.code == "invalid_argument"
    with pytest.raises(ValidationError):
        op(conn, "memory.links.add", {"fromId": a, "toId": b, "kind": "X"})
    with pytest.raises(NotFound):
        op(conn, "memory.links.add", {"fromId": a, "toId": 99, "kind": "RELATES_TO"})
