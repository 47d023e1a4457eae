"""``atomic-agent doctor``: does the configured model server do what the daemon needs?

Runs, against the primary backend of the configuration (``<state>/config.json`` and the
command's options; without ``llm.url`` the embedded llama.cpp server is started for the
check, as ``serve`` starts it, and stopped after it), the three things a turn and its reflection depend on, and
says in one line each whether they work:

* ``server`` -- the start-up probe (``GET /health`` or ``GET /v1/models``);
* ``action`` -- one agent step under the action constraint (GBNF, JSON schema or none:
  ``llm.structuredOutput``, :mod:`runtime.services.structured`): the completion must be
  one JSON action (a reply, a tool call or a finish). Prose is accepted by the agent as
  a reply, so it is reported as a warning: tool calls will not happen;
* ``reflection`` -- one reflection of an exchange that states a name and a city: at
  least one ``SET`` fact must come back through the reflection parser, and one of them
  must hold what was said (a tiny model may write the format with invented values).

Exit code 0 when the action and the reflection work, 1 when either does not (or the
server cannot be reached), 2 for a bad configuration or option.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import trio

from actors.agent.prompt import (Invalid, Reply, TailInput, ToolCall, action_grammar, agent_prompt,
                                 build_tail, parse_action)
from actors.reflection.actor import N_PREDICT as REFLECTION_N_PREDICT
from actors.reflection.grammar import REFLECTION_GRAMMAR
from actors.reflection.parser import parse_reflection
from actors.reflection.prompt import REFLECTION_PREFIX, build_reflection_prompt
from runtime.kernel.actor import leaf_exception
from runtime.services.backends import BackendPool, backends_from_config, primary_structured_mode
from runtime.services.config import Config, ConfigError, load_config
from runtime.services.llama import EmbeddedLLMError
from runtime.services.llm import LLMError
from runtime.services.models import ModelError, resolve_model

from .daemon import ServeOptions, partial_llama, probe_llm
from .safe_text import print_error

__all__ = ["doctor_command"]

ACTION_QUESTION = "What is 2 + 2? Answer briefly."
REFLECTION_USER = "My name is Dana and I live in Lyon."
REFLECTION_REPLY = "Nice to meet you, Dana! Lyon is a lovely city."
CHECK_TIMEOUT_S = 180.0
"""Bound (s) on one check's completion (a cold 1.5B prompt on 2 cores takes ~25 s)."""


def _configured(args: argparse.Namespace, state_dir: Path) -> Config:
    cfg = load_config(state_dir)
    llm = cfg.llm
    changes: dict[str, Any] = {}
    if args.llm_url:
        changes["url"] = args.llm_url.rstrip("/")
    if args.api:
        changes["api"] = args.api
    if args.model:
        changes["model"] = args.model
    if args.structured_output:
        changes["structured_output"] = args.structured_output
    return msgspec.structs.replace(cfg, llm=msgspec.structs.replace(llm, **changes))


def doctor_command(args: argparse.Namespace, state_dir: Path) -> int:
    """Run the checks and print one line each; the exit code (module docstring)."""
    if args.llm_url and not args.llm_url.lower().startswith(("http://", "https://")):
        print_error(f"--llm-url must be an http:// or https:// URL (not "
                    f"{args.llm_url!r})")
        return 2
    try:
        cfg = _configured(args, state_dir)
    except ConfigError as exc:
        print_error(str(exc))
        return 2
    try:
        code = trio.run(_doctor, cfg, state_dir)
    except KeyboardInterrupt:
        return 130
    if code:
        print_error("doctor: a check failed (the FAIL line above says which)")
    return code


async def _doctor(cfg: Config, state_dir: Path) -> int:
    if cfg.llm.url:
        where = (f"{cfg.llm.url} ({cfg.llm.api}" + (f", model {cfg.llm.model}" if cfg.llm.model
                                                    else "") + ")")
        print(f"doctor: {where}, structured output {primary_structured_mode(cfg)}", flush=True)
        return await _checks(cfg, cfg.llm.url)
    try:
        model = resolve_model(cfg.llm.model or cfg.llm.model_path)
    except ModelError as exc:
        print(f"server: FAIL -- {exc}", flush=True)
        return 1
    print(f"doctor: the embedded server with {model.title} (starting it for the check; "
          f"structured output {primary_structured_mode(cfg)})", flush=True)
    try:
        (state_dir / "logs").mkdir(parents=True, exist_ok=True)  # the server's log, as serve's
        async with trio.open_nursery() as nursery:
            url, desc = await nursery.start(partial_llama(cfg, ServeOptions(state_dir=state_dir),
                                                          model.path))
            print(f"server: ok -- {desc}", flush=True)
            code = await _checks(cfg, url, probed=True)
            nursery.cancel_scope.cancel()
            return code
    except Exception as exc:  # noqa: BLE001 - the nursery wraps what the server task raised
        leaf = leaf_exception(exc)
        if not isinstance(leaf, (EmbeddedLLMError, OSError)):
            raise
        print(f"server: FAIL -- {leaf}", flush=True)
        return 1


async def _checks(cfg: Config, url: str, probed: bool = False) -> int:
    if not probed:
        status = await probe_llm(cfg)
        print(f"server: {'ok' if status == 'ok' else 'FAIL -- ' + status}", flush=True)
        if status != "ok":
            return 1
    pool = BackendPool(backends_from_config(cfg, url))
    try:
        _waiting("one agent action")
        action_ok = await _action(pool, cfg)
        _waiting("one reflection")
        reflection_ok = await _reflection(pool)
    finally:
        await pool.aclose()
    refused = [f for b in pool.backends for f in getattr(b, "refused_fields", [])]
    if refused:
        print(f"note: the server refused {', '.join(refused)}; completions went without it "
              "(set llm.structuredOutput to none to skip the retry)", flush=True)
    return 0 if action_ok and reflection_ok else 1


def _waiting(what: str) -> None:
    """On a terminal, say what is being tried (stderr): the first request to a server
    evaluates the whole prompt, up to a minute on 2 cores, and silence reads as a hang."""
    if sys.stderr.isatty():
        print(f"doctor: trying {what} (the first request to a server can take a minute)…",
              file=sys.stderr, flush=True)


def _short(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


async def _action(pool: BackendPool, cfg: Config) -> bool:
    prompt = agent_prompt()
    grammar = action_grammar(prompt.tools)
    t0 = time.monotonic()
    try:
        with trio.fail_after(CHECK_TIMEOUT_S):
            tail = build_tail(TailInput(memory={}, history=[("user", ACTION_QUESTION)],
                                        context_window=cfg.llm.ctx_size))
            out = await pool.complete("doctor", prompt.prefix, tail,
                                      role="main", grammar=grammar,
                                      n_predict=cfg.llm.n_predict, temperature=0.0)
    except (LLMError, trio.TooSlowError) as exc:
        print(f"action: FAIL -- {_short(str(exc) or 'no answer in time', 160)}", flush=True)
        return False
    took = f"{time.monotonic() - t0:.1f} s"
    action = parse_action(out.text)
    try:
        strict = isinstance(json.loads(out.text), dict)
    except ValueError:
        strict = False
    if isinstance(action, Invalid):
        print(f"action: FAIL -- {action.reason}: {_short(out.text)!r} ({took})", flush=True)
        return False
    if isinstance(action, Reply) and not strict:
        print(f"action: works in prose only -- the model did not write a JSON action, so "
              f"the agent takes its text as the reply and never calls a tool: "
              f"{_short(out.text)!r} ({took})", flush=True)
        return True
    kind = "tool call" if isinstance(action, ToolCall) else type(action).__name__.lower()
    print(f"action: ok -- a JSON {kind}: {_short(out.text)} ({took})", flush=True)
    return True


async def _reflection(pool: BackendPool) -> bool:
    full = build_reflection_prompt([], REFLECTION_USER, REFLECTION_REPLY)
    t0 = time.monotonic()
    try:
        with trio.fail_after(CHECK_TIMEOUT_S):
            out = await pool.complete("reflection:doctor", REFLECTION_PREFIX.rstrip("\n"),
                                      full[len(REFLECTION_PREFIX):], role="reflection",
                                      grammar=REFLECTION_GRAMMAR, n_predict=REFLECTION_N_PREDICT,
                                      temperature=0.0)
    except (LLMError, trio.TooSlowError) as exc:
        print(f"reflection: FAIL -- {_short(str(exc) or 'no answer in time', 160)}", flush=True)
        return False
    took = f"{time.monotonic() - t0:.1f} s"
    parsed = parse_reflection(out.text)
    if not parsed.facts:
        print(f"reflection: FAIL -- no fact came back from {REFLECTION_USER!r}: "
              f"{_short(out.text)!r} ({took})", flush=True)
        return False
    facts = "; ".join(f"{f.key}={f.value}" for f in parsed.facts[:4])
    said = REFLECTION_USER.lower()
    if not any(f.value.lower() in said for f in parsed.facts):
        print(f"reflection: FAIL -- the format works but no fact holds what was said "
              f"({REFLECTION_USER!r}): {facts} ({took})", flush=True)
        return False
    print(f"reflection: ok -- {facts} ({took})", flush=True)
    return True
