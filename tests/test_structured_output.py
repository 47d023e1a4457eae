"""Structured output per backend (runtime/services/structured.py): which field a request
carries in each mode, a refused ``response_format`` dropped once, and a real llama.cpp
server's OpenAI endpoint held to the agent's action schema.

Rules: scripted servers come from ``tests.fakes.llama_server``; the real-server test
starts the installed llama.cpp server with the smallest bundled model and is skipped
where none is installed (CI installs both).
"""

from __future__ import annotations

import json
from functools import partial

import pytest
import trio

from actors.agent.prompt import action_grammar, agent_prompt
from runtime.services.backends import REFUSED_FIELDS, LlamaBackend, OpenAIBackend
from runtime.services.config import parse_config
from runtime.services.llama import run_llama_server
from runtime.services.llm import REPEAT_PENALTY, TOP_K, TOP_P, LlamaClient
from runtime.services.structured import json_schema_of, resolve_mode, response_format
from runtime.shell.client import open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama
from tests.test_e2e_real_llm import INSTALLED  # (server argv, smollm2-135m path) or None

TOOLS = ("memory.notes.recall", "memory.notes.store")


def test_modes_resolve_per_api():
    assert resolve_mode("auto", native=True) == "gbnf"
    assert resolve_mode("json_schema", native=True) == "gbnf"  # llama.cpp's own constraint
    assert resolve_mode("none", native=True) == "none"
    assert resolve_mode("auto", native=False) == "json_schema"
    assert resolve_mode("auto", native=False, grammar_switch=True) == "gbnf"  # older switch
    assert resolve_mode("none", native=False, grammar_switch=True) == "none"
    with pytest.raises(ValueError):
        resolve_mode("xml", native=False)
    with pytest.raises(Exception) as info:
        parse_config('{"llm": {"structuredOutput": "xml"}}')
    assert "llm.structuredOutput" in str(info.value)
    cfg = parse_config('{"llm": {"fallbacks": [{"url": "http://x", "structuredOutput": "none"}]}}')
    assert cfg.llm.fallbacks[0].structured_output == "none"


def test_the_action_schema_says_what_the_grammar_says():
    """The schema beside the agent's action grammar offers the same three objects and
    the same tools; the reply-only grammar gets a reply-only schema."""
    name, schema = json_schema_of(action_grammar(TOOLS))
    keys = [sorted(o["properties"]) for o in schema["anyOf"]]
    assert name == "agent_action" and keys == [["reply"], ["finish"], ["args", "tool"]]
    assert schema["anyOf"][2]["properties"]["tool"]["enum"] == list(TOOLS)
    assert [sorted(o["properties"]) for o in json_schema_of(action_grammar(()))[1]["anyOf"]] \
        == [["reply"], ["finish"]]
    reply = json_schema_of(agent_prompt().reply_grammar)
    assert reply is not None and reply[1]["required"] == ["reply"]
    assert response_format(None) is None


LINES_OK = ["SET name=Priya", "SET favourite_tool=a rusty wrench", "NOTE The user's sister "
            "Zoe is a pilot in Oslo.", "FORGET pet", "NONE", "SET city=São Paulo"]
LINES_BAD = ["SET Name=Priya", "SET name=", "SET =x", "NOTE " + "x" * 121,
             "SET pinned=x [pinned=false]", "NOTE she said \"hi\"", "NOTE a\\b",
             "NOTE two\nlines", "EVOLVE x", "SET name=Priya\n", "note lower case",
             "SET " + "k" * 33 + "=v"]


def test_the_reflection_schema_admits_what_the_line_grammar_admits():
    """Each reflection line is one string of ``{"lines": [...]}`` held to a pattern with
    the grammar's bounds (and no quote or backslash, which would end a JSON string on
    llama.cpp); the backend turns the JSON back into lines the parser reads."""
    import re

    from actors.reflection.grammar import MAX_ENTRIES, REFLECTION_GRAMMAR
    from actors.reflection.parser import parse_reflection
    from runtime.services.structured import text_of

    name, schema = json_schema_of(REFLECTION_GRAMMAR)
    lines = schema["properties"]["lines"]
    assert name == "reflection_lines" and lines["maxItems"] == MAX_ENTRIES
    pattern = re.compile(lines["items"]["pattern"])  # (ECMA-262: $ ends the string, as fullmatch)
    assert [line for line in LINES_OK if not pattern.fullmatch(line)] == []
    assert [line for line in LINES_BAD if pattern.fullmatch(line)] == []
    answer = json.dumps({"lines": ["SET name=Priya", "NOTE The user's sister is Zoe.",
                                   "FORGET pet"]})
    parsed = parse_reflection(text_of(REFLECTION_GRAMMAR, answer))
    assert [(f.key, f.value) for f in parsed.facts] == [("name", "Priya")]
    assert [n.body for n in parsed.notes] == ["The user's sister is Zoe."]
    assert parsed.forgets == ["pet"]
    assert parse_reflection(text_of(REFLECTION_GRAMMAR, '{"lines": []}')).kind == "none"
    cut = text_of(REFLECTION_GRAMMAR, '{"lines": ["SET name=Priya", "SET city=Nai')
    assert cut == "SET name=Priya\n"  # cut off at max_tokens: the complete lines stay
    for text in ("SET name=Priya\n", "prose", '{"reply": "x"}', '{"lines": 3}', "{" * 5000):
        assert text_of(REFLECTION_GRAMMAR, text) == text  # not the schema's JSON: unchanged


def test_every_other_line_grammar_has_a_schema_form_that_round_trips():
    """Votes, links, the query rewriter and a distilled lesson: the JSON that their
    schema asks for comes back as the grammar's text, which their parsers accept."""
    import re

    from actors.agent.rewriter import REWRITER_GRAMMAR, parse_rewrite
    from actors.reflection.distill import distill_grammar, parse_distill
    from actors.reflection.linkgen import link_grammar, parse_links
    from actors.reflection.voting import parse_votes, vote_grammar
    from runtime.services.structured import text_of

    votes = vote_grammar([("memory", 3), ("profile", 1)])
    pattern = re.compile(json_schema_of(votes)[1]["properties"]["lines"]["items"]["pattern"])
    assert pattern.search("UPVOTE memory:3") and not pattern.search("UPVOTE memory:4")
    got, dropped = parse_votes(text_of(votes, '{"lines": ["UPVOTE memory:3", '
                                              '"DOWNVOTE profile:1"]}'),
                               [("memory", 3), ("profile", 1)])
    assert [(v.kind, v.target_id, v.direction) for v in got] == [("memory", 3, 1), ("profile", 1, -1)]
    assert dropped == 0
    links = link_grammar([3, 5], 2)
    pattern = re.compile(json_schema_of(links)[1]["properties"]["lines"]["items"]["pattern"])
    assert pattern.search("LINK 3 5 kind=RELATES_TO") and not pattern.search("LINK 3 7 kind=X")
    got_links, _ = parse_links(text_of(links, '{"lines": ["LINK 3 5 kind=DUPLICATES"]}'),
                               [3, 5], 2)
    assert [(x.from_id, x.to_id, x.kind) for x in got_links] == [(3, 5, "DUPLICATES")]
    assert parse_links(text_of(links, '{"lines": []}'), [3, 5], 2) == ([], 0)
    assert parse_rewrite(text_of(REWRITER_GRAMMAR, '{"query": "cat name Miso"}')) \
        == "cat name Miso"
    lesson = text_of(distill_grammar(True), json.dumps({
        "lesson": {"activation": "testing", "principle": 'The user runs "pytest" daily.',
                   "tags": ["python", "tests", "tools"]},
        "procedure": {"activation": "a release", "steps": ["bump the version", "tag it"]}}))
    distilled = parse_distill(lesson)
    assert distilled.principle == "The user runs 'pytest' daily."
    assert distilled.tags == ["python", "tests", "tools"]
    assert [s for s, _ in distilled.steps] == ["bump the version", "tag it"]


@pytest.mark.parametrize(("mode", "switch", "field"), [
    ("auto", False, "response_format"), ("json_schema", False, "response_format"),
    ("auto", True, "grammar"), ("gbnf", False, "grammar"), ("none", True, None)])
async def test_each_mode_sends_its_field_and_only_it(tmp_path, mode, switch, field):
    rules = [{"response": '{"reply": "ok"}'}]
    async with open_fake_llama(tmp_path, rules) as fake:
        backend = OpenAIBackend(LlamaClient(fake.url), api="openai-chat", model="m",
                                grammar=switch, structured=mode)
        out = await backend.complete("sys", "hi", role="main", grammar=action_grammar(TOOLS),
                                     n_predict=16, temperature=0.0)
        await backend.aclose()
        body = fake.openai_requests()[-1]["body"]
    assert out.text == '{"reply": "ok"}'
    sent = {f for f in ("grammar", "response_format") if f in body}
    assert sent == ({field} if field else set())
    if field == "response_format":
        assert body["response_format"]["type"] == "json_schema"
        assert body["response_format"]["json_schema"]["name"] == "agent_action"


async def test_the_completions_api_carries_the_schema_where_llama_cpp_reads_it(tmp_path):
    async with open_fake_llama(tmp_path, [{"response": '{"reply": "ok"}'}]) as fake:
        backend = OpenAIBackend(LlamaClient(fake.url), api="openai-completions", model="m")
        await backend.complete("sys", "hi", role="main", grammar=action_grammar(TOOLS),
                               n_predict=16, temperature=0.0)
        await backend.aclose()
        body = fake.openai_requests()[-1]["body"]
    assert body["json_schema"] == body["response_format"]["json_schema"]["schema"]
    assert "anyOf" in json.dumps(body["json_schema"])  # the action schema itself


async def test_native_api_drops_the_grammar_only_when_told(tmp_path):
    rules = [{"response": '{"reply": "ok"}'}]
    async with open_fake_llama(tmp_path, rules) as fake:
        for mode, expect in (("auto", True), ("none", False)):
            backend = LlamaBackend(LlamaClient(fake.url), structured=mode)
            await backend.complete("sys", "hi", role="main", grammar=action_grammar(TOOLS),
                                   n_predict=16, temperature=0.0)
            await backend.aclose()
            body = fake.completions()[-1]
            assert bool(body.get("grammar")) is expect, (mode, body)


REFUSALS = {
    # OpenAI-style 400 for a server without structured outputs
    "openai": {"status": 400, "raw_body": json.dumps({"error": {
        "message": "Invalid parameter: 'response_format' of type 'json_schema' is not "
                   "supported with this model.", "type": "invalid_request_error",
        "param": "response_format", "code": None}})},
    # a pydantic server that forbids extra fields (vLLM-style 422 body)
    "pydantic": {"status": 422, "raw_body": json.dumps({"detail": [{
        "type": "extra_forbidden", "loc": ["body", "response_format"],
        "msg": "Extra inputs are not permitted", "input": {}}]})},
    # a schema the server cannot compile
    "compile": {"status": 400, "raw_body": json.dumps({"error": {
        "code": 400, "message": "JSON schema conversion failed: unsupported anyOf",
        "type": "invalid_request_error"}})},
}


async def _actions(tmp_path, rules, times: int, reply: str):
    """``times`` agent actions through one OpenAI chat backend on a scripted server, each
    answered ``reply``: (the backend, every request body the server saw)."""
    async with open_fake_llama(tmp_path, rules) as fake:
        backend = OpenAIBackend(LlamaClient(fake.url), api="openai-chat", model="m")
        for _ in range(times):
            out = await backend.complete("sys", "hi", role="main",
                                         grammar=action_grammar(TOOLS), n_predict=16,
                                         temperature=0.0)
            assert out.text == reply
        await backend.aclose()
        return backend, [r["body"] for r in fake.openai_requests()]


@pytest.mark.parametrize("kind", sorted(REFUSALS))
async def test_a_refused_response_format_is_dropped_once_and_never_sent_again(tmp_path, kind):
    rules = [{"grammar_contains": "json_schema", **REFUSALS[kind]},
             {"response": '{"reply": "plain"}'}]
    before = REFUSED_FIELDS.get("response_format", 0)
    backend, bodies = await _actions(tmp_path, rules, 3, '{"reply": "plain"}')
    assert ["response_format" in b for b in bodies] == [True, False, False, False]
    assert backend.structured == "none" and backend.refused_fields == ["response_format"]
    assert REFUSED_FIELDS["response_format"] == before + 1


async def test_the_native_sampling_settings_go_out_until_a_server_refuses_them(tmp_path):
    refusal = {"status": 400, "raw_body": json.dumps({"error": {
        "message": "Unrecognized request argument supplied: top_k",
        "type": "invalid_request_error", "param": None, "code": None}})}
    rules = [{"has_field": "top_k", **refusal}, {"response": '{"reply": "ok"}'}]
    backend, bodies = await _actions(tmp_path, rules, 2, '{"reply": "ok"}')
    first = bodies[0]
    assert first["top_p"] == TOP_P and first["repeat_penalty"] == REPEAT_PENALTY
    assert first["top_k"] == TOP_K and first["repetition_penalty"] == REPEAT_PENALTY
    assert ["top_k" in b for b in bodies] == [True, False, False]
    assert all(b["top_p"] == TOP_P and "response_format" in b for b in bodies)
    assert backend.refused_fields == ["top_k"] and backend.structured == "json_schema"


async def test_an_unconstrained_request_gets_no_repeat_penalty(tmp_path):
    async with open_fake_llama(tmp_path, [{"response": "SET city=Turin"}]) as fake:
        backend = OpenAIBackend(LlamaClient(fake.url), api="openai-chat", model="m",
                                structured="none")
        await backend.complete("sys", "hi", role="reflection", grammar=action_grammar(TOOLS),
                               n_predict=16, temperature=0.0)
        await backend.aclose()
        body = fake.openai_requests()[-1]["body"]
    assert body["top_p"] == TOP_P
    assert not {"top_k", "repeat_penalty", "repetition_penalty", "response_format"} & set(body)


async def test_other_400s_are_not_taken_for_a_refusal(tmp_path):
    rules = [{"status": 400, "raw_body": json.dumps({"error": {
        "message": "model 'gpt-9' not found", "type": "invalid_request_error"}})}]
    async with open_fake_llama(tmp_path, rules) as fake:
        backend = OpenAIBackend(LlamaClient(fake.url, retries=0), api="openai-chat",
                                model="gpt-9")
        with pytest.raises(Exception) as info:
            await backend.complete("sys", "hi", role="main", grammar=action_grammar(TOOLS),
                                   n_predict=16, temperature=0.0)
        await backend.aclose()
    assert "gpt-9" in str(info.value) and backend.structured == "json_schema"


async def test_the_daemon_on_an_openai_server_sends_the_action_schema(tmp_path):
    """A turn through ``api: openai-chat`` (structuredOutput auto) carries the action's
    JSON schema; the reflection carries its lines schema, and its JSON answer becomes a
    stored fact."""
    rules = [{"match": "You keep a long-term memory",
              "response": '{"lines": ["SET name=Dana", "NOTE The user has a dog called Rex."]}'},
             {"grammar_contains": "agent_", "response": '{"reply": "Hi Dana!"}'}]
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_text(json.dumps({"llm": {"api": "openai-chat",
                                                           "model": "m"}}))
    async with open_fake_llama(tmp_path / "fake", rules) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            assert d.ready["structuredOutput"] == "json_schema"  # the ready line says so
            async with open_client(url=d.url, token=d.token) as c:
                await c.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
                with trio.fail_after(60):
                    frames = [f async for f in c.say("My name is Dana. I have a dog called Rex.")]
                    event = await c.wait_for(lambda f: f["type"] == "reflection")
        bodies = [r["body"] for r in fake.openai_requests() if isinstance(r["body"], dict)]
    assert frames[-1]["reason"] == "reply" and event["factKeys"] == ["name"]
    turn = [b for b in bodies if "### output" not in json.dumps(b) and b.get("messages")]
    assert turn and all(b["response_format"]["json_schema"]["name"].startswith("agent_")
                        for b in turn if b.get("max_tokens", 0) > 1)
    reflection = [b for b in bodies if "### output" in json.dumps(b)]
    assert reflection and all(b["response_format"]["json_schema"]["name"] == "reflection_lines"
                              for b in reflection)
    assert len(event["noteIds"]) == 1


# ------------------------------------------------------------------ a real server


@pytest.mark.real_llm
@pytest.mark.parametrize("api", ["openai-chat", "openai-completions"])
async def test_a_real_llama_server_holds_its_openai_endpoint_to_the_action_schema(
        tmp_path, api):
    """llama.cpp's ``/v1/chat/completions`` and ``/v1/completions`` (which reads the
    schema from ``json_schema``, not ``response_format``) with the agent's action schema:
    a 135M model
    at temperature 0.7 writes valid actions (unconstrained it writes prose and half
    objects). The schema cannot stop a completion cut off at ``max_tokens`` (the tiny
    model sometimes pads with newlines, which JSON allows, until ``max_tokens``: 1-3 of
    these 5 at temperature 0.7), so every completion must open an object, every one that
    stopped by itself must be a valid action, and at least one must stop by itself."""
    if INSTALLED is None:
        pytest.skip("no llama.cpp server or smollm2-135m installed")
    model = INSTALLED[1]
    async with trio.open_nursery() as nursery:
        url, _desc = await nursery.start(partial(
            run_llama_server, model=model, parallel=1, ctx_size=2048,
            log_path=tmp_path / "server.log", startup_timeout_s=120))
        backend = OpenAIBackend(LlamaClient(url, timeout_s=120), api=api, model=None)
        prompt = agent_prompt(TOOLS)
        stopped = 0
        for text in ("Remember that my cat is called Miso.", "What is my cat's name?",
                     "hello", "Forget what I said about work.", "Which editor do I use?"):
            with trio.fail_after(120):
                out = await backend.complete(prompt.prefix, text, role="main",
                                             grammar=action_grammar(TOOLS), n_predict=200,
                                             temperature=0.7)
            assert out.text.lstrip().startswith("{"), out.text  # unconstrained: prose
            if out.stop_type == "length":
                continue
            stopped += 1
            action = json.loads(out.text)
            assert isinstance(action, dict) and (
                set(action) in ({"reply"}, {"finish"}) and isinstance(next(iter(
                    action.values())), str)
                or set(action) == {"tool", "args"} and action["tool"] in TOOLS
                and isinstance(action["args"], dict)), out.text
        assert stopped >= 1
        assert backend.structured == "json_schema" and not backend.refused_fields
        await backend.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.real_llm
async def test_a_real_llama_server_writes_reflection_lines_as_json_on_the_default_model(tmp_path):
    """The reflection through llama.cpp's ``/v1/chat/completions`` with its lines schema,
    on the default model: the raw answer is the schema's JSON, every line in it matches
    the line pattern, and what the backend hands back parses to the user's facts."""
    import re

    from actors.reflection.actor import N_PREDICT
    from actors.reflection.grammar import REFLECTION_GRAMMAR
    from actors.reflection.parser import parse_reflection
    from actors.reflection.prompt import REFLECTION_PREFIX, build_reflection_prompt
    from runtime.services.models import resolve_model
    from tests.test_e2e_real_llm import _need_default_model

    _need_default_model()
    pattern = re.compile(json_schema_of(REFLECTION_GRAMMAR)[1]["properties"]["lines"][
        "items"]["pattern"])
    raw: list[str] = []
    async with trio.open_nursery() as nursery:
        url, _desc = await nursery.start(partial(
            run_llama_server, model=resolve_model(None).path, parallel=1, ctx_size=4096,
            log_path=tmp_path / "server.log", startup_timeout_s=300))
        backend = OpenAIBackend(LlamaClient(url, timeout_s=300), api="openai-chat", model=None)
        real_complete = backend._complete

        async def keep_raw(*args, **kwargs):
            out = await real_complete(*args, **kwargs)
            raw.append(out.text)
            return out

        backend._complete = keep_raw  # type: ignore[method-assign]
        prompt = build_reflection_prompt(
            [], "I'm Dana, I live in Lyon and I play the cello.", "Nice to meet you, Dana!")
        with trio.fail_after(300):
            out = await backend.complete(REFLECTION_PREFIX.rstrip("\n"),
                                         prompt[len(REFLECTION_PREFIX):], role="reflection",
                                         grammar=REFLECTION_GRAMMAR, n_predict=N_PREDICT,
                                         temperature=0.0)
        await backend.aclose()
        nursery.cancel_scope.cancel()
    lines = json.loads(raw[0])["lines"]  # the server answered the schema's JSON
    assert lines and all(pattern.fullmatch(line) for line in lines), lines
    facts = {f.key: f.value for f in parse_reflection(out.text).facts}
    assert facts.get("name") == "Dana" and facts.get("city") == "Lyon", (raw, out.text)
    assert backend.structured == "json_schema" and not backend.refused_fields
