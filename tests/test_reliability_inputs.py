"""Bad input, fuzzed: command-line arguments, the model's actions and tool
arguments, reflection completions. Hypothesis-driven with a fixed seed (``derandomize``)
so CI replays the same inputs; no shrinking (a failure is reported as generated).

* **CLI** — :data:`CLI_ARGVS` argument lists built from the real subcommand tree
  (``build_parser``): subcommands and incomplete command paths, known flags with odd
  values (negative and huge numbers, odd unicode, undecodable bytes as Python presents
  them, missing values), unknown flags and stray tokens. ``main`` runs in-process against
  an empty state directory with no daemon; :data:`CLI_SUBPROCESS_ARGVS` more run as the
  real console command with raw undecodable bytes in ``argv`` (and on ``chat``'s stdin)
  or numbers beyond 64 bits, without and then with a daemon running. Every run gives an
  int exit code and no traceback: argparse's usage error (exit 2), or one
  ``atomic-agent: …`` line; commands that need a daemon say none is running (exit 3);
  none waits forever. In-process, ``serve`` only ever gets an unknown flag and ``chat``
  finds no daemon.
* **Model output** — :data:`ACTION_TEXTS` completions through ``parse_action``
  in-process (it never raises, and what it returns can be sent between actors), then
  :data:`MODEL_OUTPUTS` through a real daemon whose scripted llama-server answers the
  agent with them: tool calls of every memory tool with randomly shaped arguments
  (wrong types, missing, huge, negative, nested, lone surrogates), unknown tools,
  malformed and deeply nested JSON, prose, empty text, odd replies. Every turn ends
  with ``turn.finished``, the daemon answers ``ping``, no actor restarts, the canary note
  and fact are intact, memory holds only what valid tool calls wrote, and every
  exchange is in ``sessions.sqlite``.
* **Reflection** — :data:`REFLECTION_COMPLETIONS` completions through the parser and
  the grounding filter in-process (never raise; every fact and note they keep is
  valid), then :data:`REFLECTION_DAEMON_COMPLETIONS` through a real daemon's reflection
  actor: it never crashes and writes nothing invalid.
"""

from __future__ import annotations

import argparse
import builtins
import io
import json
import os
import re
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import msgspec
import pytest
import trio
from hypothesis import example, given
from hypothesis import strategies as st

from actors.agent.prompt import (
    Finish,
    Invalid,
    Reply,
    ToolCall,
    parse_action,
    partial_reply,
)
from actors.agent.sessions import SessionStore
from actors.memory.ops import OPS, TOOL_NAMES
from actors.policy.grounding import filter_ungrounded
from actors.reflection.parser import (
    BODY_MAX_CHARS,
    KEY_RE,
    MAX_TAGS,
    VALUE_MAX_CHARS,
    ParsedReflection,
    parse_reflection,
)
from runtime.shell import cli
from runtime.shell.client import ClientError, open_client
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama
from tests.fuzzing import fuzz_settings

pytestmark = pytest.mark.slow  # hypothesis batches through the CLI, agent and reflection

# ------------------------------------------------------------------ case counts
CLI_ARGVS = 240
"""Argument lists run through ``main`` in-process per CI run (for docs/RELIABILITY.md)."""
ACTION_TEXTS = 800
"""Completions through the agent's action parser in-process per CI run."""
AGENT_EXAMPLES = 3
OUTPUTS_PER_EXAMPLE = 40
MODEL_OUTPUTS = AGENT_EXAMPLES * OUTPUTS_PER_EXAMPLE
"""Model outputs answered to the agent of a real daemon per CI run."""
REFLECTION_COMPLETIONS = 600
"""Reflection completions through parser and grounding filter in-process per CI run."""
REFLECTION_DAEMON_COMPLETIONS = 12
"""Reflection completions answered to a real daemon's reflection actor per CI run."""

FUZZ_COUNTS = {"CLI argument lists": CLI_ARGVS, "action texts": ACTION_TEXTS,
               "model outputs to a daemon": MODEL_OUTPUTS,
               "reflection completions": REFLECTION_COMPLETIONS,
               "reflection completions to a daemon": REFLECTION_DAEMON_COMPLETIONS}
"""Generated inputs per CI run, scaled by ``bench.fuzz``."""

# ------------------------------------------------------------------ text shapes
_ANY_CHAR = st.characters(blacklist_characters="\x00")  # lone surrogates included
_VALID_CHAR = st.characters(blacklist_categories=("Cs", "Cc"))
any_text = st.text(_ANY_CHAR, max_size=40)
valid_text = st.text(_VALID_CHAR, min_size=1, max_size=40).filter(str.strip)
#: Any text but lone surrogates (those come from explicit cases, so that most wild tool
#: arguments reach the memory tools instead of being refused by the action parser).
odd_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                   max_size=40)
#: What Python puts in ``sys.argv`` for bytes that are not UTF-8 (surrogateescape).
undecodable = st.lists(st.integers(1, 255), min_size=1, max_size=6).map(bytes).map(
    lambda b: b.decode("utf-8", "surrogateescape"))
odd_unicode = st.sampled_from([
    "\u202e", "\u200b", "\ufeff", "e\u0301", "\U0001f600", "\u2028", "\u00a0", "٣", "１２",
    "\ud800", "\udfff", "\ud83d\ude00", "\x1b[31m", "\r", "\t", "<|im_start|>system",
    "### respond", "'", '"', "\\", "%s", "{}", "$(id)", "~", ".", "..",
])
huge_numbers = st.one_of(
    st.integers(-2**70, 2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**63 - 1, 2**63, 2**64, 2**64 + 1, -2**63 - 1,
                     10**30, -10**30]))
number_tokens = st.one_of(
    huge_numbers.map(str),
    st.sampled_from(["1e3", "1e309", "-1e309", "nan", "inf", "-inf", "0x10", "1_000",
                     " 5", "5 ", "+7", "--1", "0.5", "-0", "٣", "１２", ""]))


# ============================================================================ CLI
def _leaf_parsers() -> tuple[dict[tuple[str, ...], argparse.ArgumentParser],
                             list[tuple[str, ...]]]:
    """(every full command path → its parser, every incomplete path) of the real CLI."""
    leaves: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    partial: list[tuple[str, ...]] = []

    def walk(p: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            leaves[path] = p
            return
        partial.append(path)
        for name, child in subs[0].choices.items():
            walk(child, path + (name,))

    walk(cli.build_parser(), ())
    return leaves, partial


LEAVES, PARTIAL_PATHS = _leaf_parsers()
DAEMON_COMMANDS = {("ask",), ("chat",), ("metrics",), ("stop",)}
assert DAEMON_COMMANDS <= set(LEAVES) and ("serve",) in LEAVES


def _safe_dirs(root: Path) -> list[str]:
    """``--state-dir`` / ``recover FILE`` values: only ever paths under ``root``."""
    return [str(root / "state"), str(root / "missing" / "deeper"), str(root / "afile"),
            str(root / "state" / "memory.sqlite"), ""]


def _token_safe(s: str) -> bool:
    """Random tokens may end up as ``--state-dir`` or a file (tokens are shuffled), so
    none may name a path outside the temporary working directory."""
    return not s.startswith(("--", "/", "~")) and ".." not in s


def _value_for(action: argparse.Action) -> st.SearchStrategy:
    """A value token for one argument: plausible or hostile."""
    if action.dest in ("state_dir", "global_state_dir", "file"):
        return st.integers(0, 4).map(lambda i: f"@safe{i}")  # replaced by _safe_dirs
    plausible: list[st.SearchStrategy] = []
    if action.choices:
        plausible.append(st.sampled_from(sorted(action.choices)))
    if action.type is int:
        plausible.append(st.integers(-5, 60).map(str))
    if action.type is not None and action.type is not int:  # --timeout
        plausible.append(st.sampled_from(["0.5", "1", "300", "0", "-1", "nan", "inf", "1e-300"]))
    plausible.append(st.sampled_from(["hello", "editor", "vim", "Dana drinks green tea", "a,b"]))
    return st.one_of(*plausible, number_tokens, valid_text, any_text, odd_unicode,
                     undecodable).filter(_token_safe)


STRAY = st.one_of(
    st.sampled_from(["--no-such-flag", "-x", "--", "-", "--limit=", "--limit=-1", "--json",
                     "-h", "--help", "--tags", "-k", "memory", "notes", "list", "serve"]),
    st.one_of(number_tokens, odd_unicode, undecodable, any_text).filter(_token_safe))


@st.composite
def argvs(draw) -> list[str]:
    """One argv from the real subcommand tree (see the module docstring)."""
    kind = draw(st.sampled_from(["leaf"] * 8 + ["partial", "global", "stray"]))
    if kind == "partial":
        argv = list(draw(st.sampled_from(PARTIAL_PATHS)))
        return _never_serve(argv + draw(st.lists(STRAY, max_size=2)))
    if kind == "stray":
        return _never_serve(draw(st.lists(STRAY, min_size=1, max_size=4)))
    path = draw(st.sampled_from(sorted(LEAVES)))
    parser = LEAVES[path]
    argv = list(path)
    if kind == "global":
        argv = ["--state-dir", draw(st.integers(0, 4).map(lambda i: f"@safe{i}"))] + argv
    tail: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if not action.option_strings:  # positional
            if draw(st.integers(0, 9)) > 0:
                tail.append(draw(_value_for(action)))
            continue
        if draw(st.integers(0, 2)) > 0:
            continue
        flag = draw(st.sampled_from(action.option_strings))
        if action.nargs == 0:
            tail.append(flag)
        else:
            how = draw(st.sampled_from(["value"] * 6 + ["missing", "equals"]))
            if how == "equals" and flag.startswith("--"):
                tail.append(f"{flag}={draw(_value_for(action))}")
            elif how == "missing":
                tail.append(flag)  # value missing (or the next token taken as one)
            else:
                tail += [flag, draw(_value_for(action))]
    for _ in range(draw(st.integers(1, 2)) if draw(st.integers(0, 3)) == 0 else 0):
        tail.insert(draw(st.integers(0, len(tail))), draw(STRAY))
    tail = draw(st.permutations(tail)) if draw(st.integers(0, 7)) == 0 else tail
    argv += tail
    return _never_serve(argv)


def _never_serve(argv: list[str]) -> list[str]:
    """``serve`` anywhere (a stray token may be one) gets an unknown flag, so argparse
    refuses it and no daemon starts in-process (found by ``bench.fuzz``: a stray-only
    ``['serve']`` reached the real command)."""
    return [*argv, "--no-such-flag"] if "serve" in argv else argv


def _resolve(argv: list[str], root: Path) -> list[str]:
    """Replace the ``@safeN`` placeholders (also in ``--flag=@safeN``) by real paths."""
    safe = _safe_dirs(root)
    return [re.sub(r"@safe(\d)", lambda m: safe[int(m.group(1))], a) for a in argv]


def _check_cli_result(argv: list[str], code: object, out: str, err: str) -> None:
    where = f"argv={argv!r}\nstdout={out[-500:]!r}\nstderr={err[-1500:]!r}"
    assert isinstance(code, int) and not isinstance(code, bool), where
    assert "Traceback" not in err and "Traceback" not in out, where
    if code == 0:
        return
    if code == 2 and "usage: atomic-agent" in err:  # argparse (or a config error)
        assert "error:" in err, where
        return
    lines = err.strip().split("\n")
    assert lines, where
    assert lines[-1].startswith("atomic-agent: "), where
    assert code in (1, 2, 3, 130), where
    errors = [ln for ln in lines if ln.startswith("atomic-agent: ")]
    assert len(errors) == 1 and len(errors[0]) <= 600, where


def _run_main(argv: list[str]) -> tuple[object, str, str]:
    """``main(argv)`` with stdout and stderr as a console has them: UTF-8, strict on
    stdout, ``backslashreplace`` on stderr (Python's own default for stderr)."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace",
                           write_through=True)
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code: object = cli.main(argv)
        except SystemExit as exc:  # argparse: usage error (2) or --help (0)
            code = exc.code
    out.flush()
    err.flush()
    return code, out.buffer.getvalue().decode(), err.buffer.getvalue().decode()


@fuzz_settings(CLI_ARGVS)
@given(argv=argvs())
# A path with a line feed and a control character, in an error message (found by CI).
@example(argv=["clients", "resume", "--state-dir", "\n\x14b", "@safe1"])
def test_fuzzed_cli_arguments_get_one_line_errors_and_no_traceback(argv, monkeypatch):
    import runtime.shell.daemon
    import runtime.shell.mcp_server

    def no_serve(*_a, **_k):
        raise AssertionError(f"serve would have run for {argv!r}")

    def no_input(*_a, **_k):
        raise AssertionError(f"chat would have prompted for {argv!r}")

    async def mcp_checked(*_a, **_k):
        return 0  # the options were accepted; serving stdio here would read the test's stdin

    monkeypatch.setattr(runtime.shell.daemon, "serve", no_serve)
    monkeypatch.setattr(runtime.shell.mcp_server, "mcp_main", mcp_checked)
    monkeypatch.setattr(builtins, "input", no_input)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "state").mkdir()
        (root / "afile").write_text("not a directory\n")
        monkeypatch.setenv("ATOMIC_AGENT_STATE_DIR", str(root / "state"))
        monkeypatch.chdir(root)  # anything relative lands in the temporary directory
        real = _resolve(argv, root)
        code, out, err = _run_main(real)
        _check_cli_result(real, code, out, err)
        assert not (root / "state" / "daemon.json").exists()
        try:
            with redirect_stderr(io.StringIO()), redirect_stdout(io.StringIO()):
                args = cli.build_parser().parse_args(real)
        except SystemExit:
            return  # usage error or --help: checked above
        if (args.command,) in DAEMON_COMMANDS:
            if args.command == "ask" and not args.text.strip():
                assert code == 1 and "the message is empty" in err, (real, err)
            else:
                assert code == 3 and "no atomic-agent daemon is running" in err, (real, err)


SUBPROCESS_ARGVS: list[tuple[list[bytes], int, str]] = [  # argv, exit status, stderr
    ([b"memory", b"notes", b"store", b"caf\xe9 \xff\xfe"], 1, "atomic-agent: content: "),
    ([b"memory", b"profile", b"set", b"editor", b"\xed\xa0\x80"], 1,  # an encoded surrogate
     "atomic-agent: value: "),
    ([b"memory", b"notes", b"recall", b"\xc3\x28", b"-k", b"99999999999999999999999"], 1,
     "atomic-agent: query: "),
    ([b"memory", b"links", b"list", b"--note", b"-99999999999999999999999"], 1,
     "atomic-agent: id: "),
    ([b"ask", b"\xff\xfe hello"], 3, "atomic-agent: no atomic-agent daemon is running"),
]
_NOT_UTF8 = "atomic-agent: text that is not valid UTF-8 (undecodable bytes) cannot be sent"
SUBPROCESS_ARGVS_DAEMON: list[tuple[list[bytes], bytes, int, str]] = [  # + stdin
    ([b"memory", b"notes", b"store", b"caf\xe9"], b"", 1, _NOT_UTF8),
    ([b"ask", b"\xff\xfe hello"], b"", 1, _NOT_UTF8),
    ([b"ask", b"hello", b"--session", b"a\xffb"], b"", 1, _NOT_UTF8),
    ([b"memory", b"notes", b"forget", b"9223372036854775808"], b"", 1,
     "atomic-agent: a number is outside the signed 64-bit range"),
    ([b"chat"], b"hello\n\xff\xfe\nagain\n", 0, "session "),
]
CLI_SUBPROCESS_ARGVS = len(SUBPROCESS_ARGVS) + len(SUBPROCESS_ARGVS_DAEMON)
"""Argument lists (raw undecodable bytes, numbers beyond 64 bits) run as the real
command per CI run, without and with a daemon."""


async def _command(argv: list[bytes], env: dict, cwd: Path, stdin: bytes = b""
                   ) -> tuple[int, str, str]:
    with trio.fail_after(60):  # a command that waits for an answer that never comes
        r = await trio.run_process([os.fsencode(sys.executable), b"-m", b"runtime.shell.cli", *argv],
                                   cwd=cwd, env=env, stdin=stdin, capture_stdout=True,
                                   capture_stderr=True, check=False)
    out, err = (r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace"))
    _check_cli_result([a.decode("utf-8", "replace") for a in argv], r.returncode, out, err)
    return r.returncode, out, err


async def test_undecodable_argv_bytes_in_the_real_command(tmp_path):
    """The console command with raw bytes Python cannot decode as UTF-8 in ``argv`` (and
    on stdin for ``chat``), and numbers beyond 64 bits: one line naming the problem,
    nothing half-written; with a daemon running, no command waits forever and ``chat``
    refuses the line and goes on. Stdin is read strictly, as in a UTF-8 locale."""
    state = tmp_path / "state"
    state.mkdir()
    env = {**os.environ, "ATOMIC_AGENT_STATE_DIR": str(state), "PYTHONPATH": str(REPO),
           "PYTHONIOENCODING": "utf-8:strict"}
    for argv, status, message in SUBPROCESS_ARGVS:
        code, out, err = await _command(argv, env, tmp_path)
        assert code == status and err.startswith(message), (argv, code, err)
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            for argv, stdin, status, message in SUBPROCESS_ARGVS_DAEMON:
                code, out, err = await _command(argv, env, tmp_path, stdin)
                assert code == status and err.startswith(message), (argv, code, err)
            async with open_client(url=d.url, token=d.token) as c:  # nothing half-written
                assert await c.memory("memory.notes.list") == []
                assert await c.memory("memory.profile.list") == []
    assert out.count("agent> ok") == 2 and "not valid UTF-8 text; not sent" in out, out


# ================================================================ model output
_FIELDS = {name: [f.encode_name for f in msgspec.structs.fields(OPS[name])]
           for name in TOOL_NAMES}
_CANARY_ID = 1
_SURROGATE = re.compile("[\ud800-\udfff]")
CANARY_NOTE = "canary note: the harbour gate code is 4217"
CANARY_KEY = "canary_fact"

scalars = st.one_of(st.none(), st.booleans(), huge_numbers,
                    st.floats(allow_nan=True, allow_infinity=True), odd_text,
                    st.sampled_from(["x" * 5000, "", " ", "\ud800", "#1", "a\x00b"]))
wild = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(odd_text, inner, max_size=4), max_leaves=8)
key_like = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda k: k != CANARY_KEY)
word = st.from_regex(r"[a-z]{1,6}", fullmatch=True)


def _valid_args(name: str) -> st.SearchStrategy:
    """Arguments of the right shape (most are accepted; some break a store limit)."""
    opt = st.fixed_dictionaries
    return {
        "memory.profile.set": opt({"key": key_like, "value": valid_text},
                                  optional={"pinned": st.booleans(),
                                            "keywords": st.lists(word, max_size=3)}),
        "memory.profile.remove": opt({"key": key_like}),
        "memory.profile.list": st.just({}),
        "memory.notes.store": opt({"content": valid_text},
                                  optional={"tags": st.lists(word, max_size=3)}),
        "memory.notes.recall": st.one_of(opt({"query": valid_text}),
                                         opt({"id": st.integers(1, 30)})),
        "memory.notes.forget": opt({"id": st.integers(2, 30)}),
        "memory.lessons.recall": st.one_of(opt({"query": valid_text}, optional={"k": st.integers(0, 12)}),
                                           opt({"id": st.integers(1, 30)})),
        "memory.procedures.recall": st.one_of(opt({"query": valid_text}),
                                              opt({"id": st.integers(1, 30)})),
    }[name]


def _wild_args(name: str) -> st.SearchStrategy:
    keys = st.sampled_from(_FIELDS[name] + ["bogus", "", "Content", "working_dir", "ID"])
    return st.dictionaries(keys, wild, max_size=4)


@st.composite
def tool_calls(draw) -> str:
    name = draw(st.sampled_from(TOOL_NAMES))
    args = draw(st.one_of(_valid_args(name), _wild_args(name)))
    if name == "memory.notes.forget" and args.get("id") == _CANARY_ID:
        args["id"] = 0  # the canary may only be lost through a fault
    text = json.dumps({"tool": name, "args": args}, ensure_ascii=draw(st.booleans()))
    return f"```json\n{text}\n```" if draw(st.integers(0, 9)) == 0 else text


def _deep(n: int) -> str:
    return '{"tool": "memory.notes.store", "args": {"content": ' + "[" * n + "]" * n + "}}"


other_outputs = st.one_of(
    st.builds(lambda t, a: json.dumps({"tool": t, "args": a}), any_text,
              st.dictionaries(any_text, wild, max_size=3)),                # unknown tools
    st.builds(lambda t, a: json.dumps({"tool": t, "args": a}), wild, wild),  # odd shapes
    st.builds(lambda s, f: s[: int(len(s) * f)], tool_calls(),
              st.floats(0, 0.99)),                                         # cut short
    st.integers(100, 3000).map(_deep),                                     # deep nesting
    st.sampled_from(["", " ", "\n", "{", "}", "[]", "null", "{}", '{"args": {}}',
                     '{"reply": 5}', '{"finish": null}', '{"tool": 3, "args": {}}',
                     '{"reply": "\\ud83d\\ude00 fine"}', '{"reply": "\\ud800"}',
                     '{"finish": "\\udfff"}', '{"reply": "a\\u0000b"}',
                     '{"reply": NaN}', '{"tool": "memory.notes.forget", "args": {"id": 1e400}}',
                     '{"tool": "memory.notes.forget", "args": {"id": 99999999999999999999999}}',
                     '{"tool": "memory.notes.store", "args": {"content": "\\udcff"}}',
                     '{"reply": ""}', "{" + "a" * 20000]),
    st.builds(lambda t: json.dumps({"reply": t}, ensure_ascii=False), any_text),
    st.builds(lambda t: json.dumps({"finish": t}), any_text),
    any_text,                                                              # prose
)
model_outputs = st.one_of(tool_calls(), tool_calls(), tool_calls(), other_outputs)


def _ends_turn(text: str) -> bool:
    action = parse_action(text)
    return isinstance(action, Finish) or (isinstance(action, Reply) and bool(action.text.strip()))


@fuzz_settings(ACTION_TEXTS)
@given(text=st.one_of(model_outputs, st.text(max_size=200)))
def test_fuzzed_completions_parse_to_actions_that_can_be_sent(text):
    """``parse_action`` never raises and its result crosses the actor boundary
    (msgpack) and the websocket (JSON); so do the streamed reply pieces."""
    action = parse_action(text)
    assert isinstance(action, (Reply, Finish, ToolCall, Invalid))
    msgspec.msgpack.encode(action.__dict__)
    msgspec.json.encode(action.__dict__)
    if isinstance(action, ToolCall):
        json.dumps(action.args, ensure_ascii=False).encode()
    for end in range(0, len(text) + 1, max(1, len(text) // 8)):
        piece = partial_reply(text[:end])
        msgspec.msgpack.encode(piece)


def _turns(outputs: list[str], max_steps: int) -> list[list[str]]:
    """Split outputs into turns: a turn ends after an output that ends it, or before
    ``max_steps`` so the fake server's default reply ends it."""
    turns: list[list[str]] = [[]]
    for text in outputs:
        turns[-1].append(text)
        if _ends_turn(text) or len(turns[-1]) == max_steps - 1:
            turns.append([])
    return [t for t in turns if t]


HOSTILE_MEMORY_FRAMES = [  # numbers JSON carries but messages and SQLite cannot
    ("memory.notes.forget", {"id": 2**63}, "bad_frame"),
    ("memory.notes.recall", {"id": 2**64}, "bad_frame"),
    ("memory.notes.recall", {"query": "tea", "k": 10**30}, "bad_frame"),
    ("memory.lessons.get", {"id": -(2**63) - 1}, "bad_frame"),
    ("memory.links.list", {"id": 2**63}, "bad_frame"),
    ("memory.notes.list", {"limit": [2**70]}, "bad_frame"),
    ("memory.notes.forget", {"id": -(2**63)}, "invalid_argument"),
    ("memory.notes.store", {"content": "x", "tags": [2**62]}, "invalid_argument"),
]
MAX_STEPS = 6
# Through an OpenAI-compatible completions API with the grammar sent (a llama.cpp server
# behind its OpenAI endpoint): the agent puts no words in the model's mouth there, so every
# kind of output reaches it on every step; on the native API a step offered no tool can
# only continue a reply.
_AGENT_CONFIG = {"agent": {"maxSteps": MAX_STEPS},
                 "llm": {"api": "openai-completions", "grammar": True},
                 "memory": {"reflection": {"enabled": False}, "rewriter": {"enabled": False},
                            "embeddings": {"enabled": False}, "voting": {"enabled": False},
                            "links": {"autoGenerate": False}}}


async def _agent_batch(tmp_path: Path, outputs: list[str]) -> dict[str, int]:
    state = tmp_path / f"state-{time.monotonic_ns()}"
    state.mkdir(parents=True)
    (state / "config.json").write_text(json.dumps(_AGENT_CONFIG))
    turns = _turns(outputs, MAX_STEPS)
    stats = {"turns": len(turns), "tool_steps": 0, "ok_writes": 0, "llm_errors": 0}
    ok_note_ids, ok_contents, ok_keys = {_CANARY_ID}, {CANARY_NOTE}, {CANARY_KEY}
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                session = c.session
                canary = await c.memory("memory.notes.store", {"content": CANARY_NOTE})
                assert canary["id"] == _CANARY_ID
                await c.memory("memory.profile.set", {"key": CANARY_KEY, "value": "kept"})
                expected_calls = 0
                for i, turn_outputs in enumerate(turns):
                    fake.set_rules([{"grammar_contains": "reply", "times": 1, "response": o}
                                    for o in turn_outputs])
                    with trio.fail_after(60):
                        frames = [f async for f in c.say(f"turn {i}: please go on")]
                    where = f"turn {i} outputs={turn_outputs!r}"
                    assert frames[-1]["type"] == "turn.finished", (where, frames[-3:])
                    steps = [f for f in frames if f["type"] == "step"]
                    errors = [s for s in steps if s["step"] == "error"]
                    calls = [s for s in steps if s["step"] == "tool"]
                    results = [s for s in steps if s["step"] == "tool.result"]
                    assert len(calls) == len(results), where
                    made = frames[-1]["timings"]["steps"]  # LLM calls of this turn
                    expected_calls += made
                    if frames[-1]["reason"] == "error":
                        # Only a lone surrogate the LLM client cannot read even as
                        # U+FFFD (llm.decode_repaired) may end a turn, with a typed error.
                        assert any(_SURROGATE.search(o) for o in turn_outputs), (where, errors)
                        assert errors and "malformed" in errors[-1]["message"], (where, errors)
                        stats["llm_errors"] += 1
                    else:
                        assert frames[-1]["reason"] in ("reply", "finish"), (where, frames[-3:])
                        assert not errors, (where, errors)
                        ends = _ends_turn(turn_outputs[-1])
                        assert made == len(turn_outputs) + (0 if ends else 1), (where, made)
                        assert len(calls) == sum(isinstance(parse_action(o), ToolCall)
                                                 for o in turn_outputs), where
                    stats["tool_steps"] += len(calls)
                    for call, result in zip(calls, results):
                        summary = result["summary"]
                        if summary.startswith("error:"):
                            continue
                        if call["tool"] == "memory.notes.store":
                            ok_note_ids.add(int(re.match(r'\{"id": (\d+)', summary).group(1)))
                            ok_contents.add(call["args"]["content"].strip())
                            stats["ok_writes"] += 1
                        elif call["tool"] == "memory.profile.set":
                            ok_keys.add(re.search(r'"key": "([^"]+)"', summary).group(1))
                            stats["ok_writes"] += 1
                    with trio.fail_after(10):
                        await c.request({"type": "ping"}, "pong")
                for op, args, code in HOSTILE_MEMORY_FRAMES:  # the same ops from a client
                    with trio.fail_after(10):
                        with pytest.raises(ClientError) as refused:
                            await c.memory(op, args)
                    assert refused.value.code == code, (op, args, refused.value)
                with trio.fail_after(30):
                    metrics = await c.request({"type": "metrics"}, "metrics.result")
                    notes = await c.memory("memory.notes.list", {"limit": 1000,
                                                                 "archived": "all"})
                    facts = await c.memory("memory.profile.list")
    assert metrics["restarts"] == 0, metrics
    assert len([r for r in fake.openai_requests() if r["method"] == "POST"]) == expected_calls
    by_id = {n["id"]: n for n in notes}
    assert by_id[_CANARY_ID]["content"] == CANARY_NOTE
    assert set(by_id) <= ok_note_ids, (set(by_id) - ok_note_ids)
    assert {n["content"] for n in notes} <= ok_contents
    assert {f["key"]: f["value"] for f in facts}[CANARY_KEY] == "kept"
    assert {f["key"] for f in facts} <= ok_keys
    log = d.stderr_path.read_text()
    assert "Traceback" not in log and "actor.crashed" not in log, log[-3000:]
    store = SessionStore(str(state / "sessions.sqlite"))
    try:
        saved = store.get(session)
    finally:
        store.close()
    assert saved.turns == len(turns)  # every exchange persisted
    assert sum(m.role == "user" for m in saved.messages) == len(turns)
    return stats


@fuzz_settings(AGENT_EXAMPLES)
@given(outputs=st.lists(model_outputs, min_size=OUTPUTS_PER_EXAMPLE,
                        max_size=OUTPUTS_PER_EXAMPLE, unique=True))  # even the first differs
def test_fuzzed_model_outputs_never_break_the_agent_or_memory(tmp_path, outputs):
    stats = trio.run(_agent_batch, tmp_path, outputs)
    assert stats["turns"] >= 1 and stats["tool_steps"] >= 1


# ================================================================== reflection
_USER = ("My name is Dana Silva, I live in Lisbon, I prefer vim for editing and I drink "
         "green tea every morning. Remember that I work on the harbour project.")
grounded = st.sampled_from(["Dana", "Lisbon", "vim", "green tea", "harbour project",
                            "Dana Silva", "tea every morning"])
r_key = st.one_of(st.from_regex(r"[a-z][a-z0-9_]{0,31}", fullmatch=True),
                  st.sampled_from(["Preferred Editor", "name", "city", "drink-pref",
                                   "assistant_name", "x" * 33, "1abc", "", "ключ"]),
                  any_text)
r_value = st.one_of(grounded, any_text, odd_unicode,
                    st.sampled_from(["v" * 201, "a=b=c", " ", "Lisbon [tags=x]",
                                     "vim\rnano", "tea\x0bcoffee", "<name>"]))
r_marker = st.sampled_from(["", " [pinned=false; keywords=vim,editor]",
                            " [pinned=false, keywords=[a,b]]", " [supersedes=old_key]",
                            " [valid_from=now]", " [keywords=]", " [pinned=maybe]",
                            " [pinned=false; keywords=" + ",".join(f"k{i}" for i in range(20)) + "]",
                            " [supersedes=" + "s" * 200 + "]", " [", " ]"])
r_tags = st.sampled_from(["", " [tags=a,b]", " [Tag1, tag-2]", " [2]", " [tags=]",
                          " [tags=" + ",".join(f"t{i}" for i in range(20)) + "]",
                          " [tags=Bad Tag,ok]"])
set_line = st.builds(lambda k, sep, v, m: f"SET {k}{sep}{v}{m}", r_key,
                     st.sampled_from(["=", " = ", "", "=="]), r_value, r_marker)
note_line = st.builds(lambda b, t: f"NOTE {b}{t}",
                      st.one_of(grounded, any_text, st.just("n" * 600), odd_unicode), r_tags)
r_line = st.one_of(
    set_line, set_line, note_line,
    st.builds(lambda s: "- " + s, set_line), st.builds(lambda s: f"`{s}`", note_line),
    st.sampled_from(["NONE", "```", "```text", "SET", "NOTE", "SET ", "NOTE ", "\u2022 NOTE x",
                     "set name=Dana", "EVOLVE x"]),
    any_text, odd_unicode)
reflection_completions = st.one_of(
    st.builds(lambda ls, sep: sep.join(ls), st.lists(r_line, max_size=8),
              st.sampled_from(["\n", "\r\n", "\r", "\n\n", "\u2028"])),
    st.text(max_size=300),
    st.builds(json.dumps, st.fixed_dictionaries(
        {"facts": st.lists(st.fixed_dictionaries({"key": r_key, "value": r_value}), max_size=3),
         "notes": st.lists(any_text, max_size=2)})),
    st.sampled_from(["", "NONE", "NONE\n", " NONE ", "\ud800", "SET name=\ud800Dana\n"]),
)


_GOOD_LINES = st.one_of(  # well-formed and grounded in _USER: these should be written
    st.builds(lambda k, v, m: f"SET {k}={v}{m}", st.from_regex(r"[a-z]{3,10}_[a-z]{2,8}",
                                                               fullmatch=True),
              grounded, st.sampled_from(["", " [pinned=false; keywords=vim,editor]"])),
    st.builds(lambda b, t: f"NOTE The user {b} {t}", st.sampled_from(
        ["drinks green tea every morning", "lives in Lisbon", "prefers vim for editing",
         "works on the harbour project"]), st.sampled_from(["", "[tags=a,b]", "[Tag1, tag-2]"])))
#: A daemon's reflection completion: hostile lines around at least one good one, so the
#: write path (grounding, caps, one transaction) runs with them.
daemon_reflection_completions = st.builds(
    lambda bad, good, pos, sep: sep.join(bad[:pos] + [good] + bad[pos:]),
    st.lists(r_line, max_size=5), _GOOD_LINES, st.integers(0, 5),
    st.sampled_from(["\n", "\r\n", "\r"]))


def _check_parsed(parsed: ParsedReflection) -> None:
    for f in parsed.facts:
        assert KEY_RE.fullmatch(f.key), f
        assert 1 <= len(f.value) <= VALUE_MAX_CHARS and f.value == f.value.strip(), f
        assert "\n" not in f.value and "\r" not in f.value, f
        assert not f.pinned or not f.keywords, f
        f.value.encode()  # no lone surrogates: storable as UTF-8
    for n in parsed.notes:
        assert 1 <= len(n.body) <= BODY_MAX_CHARS and "\n" not in n.body and "\r" not in n.body
        assert len(n.tags) <= MAX_TAGS, n
        n.body.encode()


@fuzz_settings(REFLECTION_COMPLETIONS)
@given(text=reflection_completions, user=st.one_of(st.just(_USER), any_text),
       caps=st.tuples(st.integers(-2, 8), st.integers(-2, 8)))
def test_fuzzed_reflection_completions_parse_to_valid_items_or_nothing(text, user, caps):
    """The parser's contract is "never raises; every bad line dropped and counted": the
    result is a ParsedReflection whose every fact and note is storable, and the grounding
    filter keeps a subset of it."""
    parsed = parse_reflection(text, max_facts=caps[0], max_notes=caps[1])
    assert isinstance(parsed, ParsedReflection)
    assert len(parsed.facts) <= max(0, caps[0]) and len(parsed.notes) <= max(0, caps[1])
    assert (parsed.kind == "entries") == bool(parsed.facts or parsed.notes)
    assert min(parsed.invalid_facts, parsed.invalid_notes, parsed.dropped_over_cap,
               parsed.ignored_lines) >= 0
    _check_parsed(parsed)
    kept = filter_ungrounded(parsed.facts, parsed.notes, user)
    assert all(f in parsed.facts for f in kept.facts) and all(n in parsed.notes for n in kept.notes)
    assert len(kept.facts) + len(kept.notes) + len(kept.dropped) == \
        len(parsed.facts) + len(parsed.notes)


_REFLECTION_CONFIG = {"memory": {"rewriter": {"enabled": False},
                                 "embeddings": {"enabled": False}}}


async def _reflection_batch(tmp_path: Path, completions: list[str]) -> dict[str, int]:
    state = tmp_path / f"state-{time.monotonic_ns()}"  # one per example (bench.fuzz runs many)
    state.mkdir(parents=True)
    (state / "config.json").write_text(json.dumps(_REFLECTION_CONFIG))
    outcomes: dict[str, int] = {}
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                canary = await c.memory("memory.notes.store", {"content": CANARY_NOTE})
                await c.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
                for i, text in enumerate(completions):
                    fake.set_rules([{"match": "### output", "times": 1, "response": text},
                                    {"grammar_contains": "reply",
                                     "response": json.dumps({"reply": f"Noted, {i}."})}])
                    with trio.fail_after(60):
                        frames = [f async for f in c.say(f"{_USER} ({i})")]
                        assert frames[-1]["type"] == "turn.finished", frames[-3:]
                        assert frames[-1]["reason"] == "reply", frames[-3:]
                        turn = frames[-1]["turn"]
                        event = await c.wait_for(lambda f, turn=turn: f.get("turn") == turn
                                                 and f.get("type") == "reflection")
                    if event["outcome"] == "failed" and _SURROGATE.search(text):
                        # As for the agent: a lone surrogate cannot cross the server's
                        # JSON (llama-server sends UTF-8), so the LLM client refuses the
                        # answer with a typed error and the reflection records "failed".
                        assert event.get("reason"), (text, event)
                    else:
                        assert event["outcome"] in ("ok", "none"), (text, event)
                    outcomes[event["outcome"]] = outcomes.get(event["outcome"], 0) + 1
                with trio.fail_after(30):
                    metrics = await c.request({"type": "metrics"}, "metrics.result")
                    notes = await c.memory("memory.notes.list", {"limit": 1000,
                                                                 "archived": "all"})
                    facts = await c.memory("memory.profile.list")
                    await c.request({"type": "ping"}, "pong")
    assert metrics["restarts"] == 0, metrics
    assert {n["id"]: n["content"] for n in notes}[canary["id"]] == CANARY_NOTE
    for f in facts:
        assert KEY_RE.fullmatch(f["key"]), f
        assert 1 <= len(f["value"]) <= VALUE_MAX_CHARS, f
        assert "\n" not in f["value"] and "\r" not in f["value"], f
    for n in notes:
        assert n["id"] == canary["id"] or "reflection" in n["tags"], n
        assert len(n["content"]) <= BODY_MAX_CHARS or n["id"] == canary["id"], n
        assert "\n" not in n["content"] and "\r" not in n["content"], n
    log = d.stderr_path.read_text()
    assert "Traceback" not in log and "actor.crashed" not in log, log[-3000:]
    return outcomes


# One daemon: the completions are drawn once (a single example), not per boot.
@fuzz_settings(1)
@given(completions=st.lists(daemon_reflection_completions, unique=True,
                            min_size=REFLECTION_DAEMON_COMPLETIONS,
                            max_size=REFLECTION_DAEMON_COMPLETIONS))
def test_fuzzed_reflection_completions_never_crash_the_reflection_actor(tmp_path, completions):
    outcomes = trio.run(_reflection_batch, tmp_path, completions)
    assert sum(outcomes.values()) == REFLECTION_DAEMON_COMPLETIONS
    assert outcomes.get("ok", 0) >= 1  # the write path ran with the hostile lines
