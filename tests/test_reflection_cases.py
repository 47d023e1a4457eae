"""Two field cases through the whole reflection path, duplicates (a near-identical note
or fact is written once) and contradictions (one current fact per key): a scripted
llama-server answers each exchange with the case's reflection output, the real
reflection actor parses and grounds it, the real memory actor writes it. (A busy
database and the pinned budget on the reflection write path: ``test_memory_actor_cases.py``.)"""

from __future__ import annotations

import pytest

from actors.store.context import MemoryContext
from actors.memory.messages import BuildContext
from tests.memory_ops import memory_op
from actors.store.schema import open_database
from actors.reflection.messages import Reflect
from runtime import open_supervisor
from tests.fakes.llama_server import open_fake_llama
from tests.test_reflection_actor import Events, profile, specs

pytestmark = pytest.mark.slow  # real actor processes against a scripted server


async def run_exchanges(tmp_path, exchanges: list[tuple[str, str]], then) -> list[str]:
    """Reflect each (user message, scripted output) in order in one session; return the
    outcomes, then call ``then(sup)`` while the daemon still runs."""
    rules = [{"match": f"USER: {user}\n", "response": output} for user, output in exchanges]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url), on_cast=ev.on_cast) as sup:
            for i, (user, _) in enumerate(exchanges):
                await sup.cast("reflection", Reflect(session="s", turn=f"t-{i}", user_message=user,
                                                     assistant_reply="Noted."))
                await ev.wait(i + 1)
            await then(sup)
    return [e.outcome for e in ev.items]


async def test_near_identical_notes_and_facts_are_written_once(tmp_path):
    seen = {}

    async def then(sup):
        hits = (await memory_op(sup, "memory.notes.recall", {"query": "ferns"})).data
        seen["hits"] = hits
        seen["profile"] = await profile(sup)

    outcomes = await run_exchanges(tmp_path, [
        ("I water the ferns every Sunday", "NOTE Waters the ferns every Sunday [home]"),
        ("Yes, I water the ferns every Sunday, they are my plants",
         "NOTE waters the ferns every Sunday.  [home, plants]"),
        ("I drink an oat flat white every morning",
         "SET coffee=oat flat white\nSET coffee=oat flat white"),
        ("The oat flat white is still my coffee", "SET coffee=Oat flat white."),
        ("Nothing new today, I just wanted to chat about ferns", "NONE"),
    ], then)
    assert outcomes == ["ok", "none", "ok", "none", "none"]
    (hit,) = seen["hits"]
    assert hit["content"] == "Waters the ferns every Sunday"
    assert sorted(hit["tags"]) == ["home", "plants", "reflection"]
    assert seen["profile"] == {"coffee": "oat flat white"}
    conn = open_database(str(tmp_path / "memory.sqlite"))
    assert conn.execute("SELECT count(*) FROM profile_facts").fetchall() == [(1,)]
    assert conn.execute("SELECT count(*) FROM memories").fetchall() == [(1,)]


async def test_one_current_fact_per_key_and_options_replace(tmp_path):
    seen = {}

    async def then(sup):
        ctx = await sup.request("memory", BuildContext(
            session="s", user_message="what should I cook for dinner?"), MemoryContext)
        seen["prompt_facts"] = {f.key: f.value for f in ctx.profile}
        facts = (await memory_op(sup, "memory.profile.list")).data
        seen["facts"] = {f["key"]: f for f in facts}

    outcomes = await run_exchanges(tmp_path, [
        ("Call me Sam", "SET preferred_name=Sam"),
        ("Actually, call me Alex", "SET preferred_name=Alex [pinned=true]"),
        ("I'm vegetarian, keep that in mind for food and dinner",
         "SET diet=vegetarian [pinned=false; keywords=food, dinner]"),
        ("These days I eat fish too", "SET diet=eats fish [pinned=false; keywords=food]"),
        ("Yes, Alex is right", "SET Preferred_Name=Alex"),
    ], then)
    assert outcomes == ["ok", "ok", "ok", "ok", "none"]
    facts = seen["facts"]
    assert set(facts) == {"preferred_name", "diet"}
    assert facts["preferred_name"]["value"] == "Alex" and facts["preferred_name"]["pinned"]
    assert facts["diet"]["value"] == "eats fish" and facts["diet"]["keywords"] == ["food"]
    # "dinner" is no longer a keyword of diet; Sam is never a current fact
    assert seen["prompt_facts"] == {"preferred_name": "Alex"}
    conn = open_database(str(tmp_path / "memory.sqlite"))
    active = conn.execute("SELECT key, count(*) FROM profile_facts WHERE superseded_by IS NULL"
                          " GROUP BY key ORDER BY key").fetchall()
    assert active == [("diet", 1), ("preferred_name", 1)]
