"""Structured output: which constraint a completion request carries, per backend.

Every caller that wants a shaped completion passes a GBNF grammar (llama.cpp's grammar
language, https://github.com/ggml-org/llama.cpp/blob/master/grammars/README.md). Where
the same shape can be said as a JSON schema, the grammar's builder registers that schema
with :func:`with_schema`, and a backend that speaks OpenAI's API sends the schema instead
(``response_format: {"type": "json_schema", ...}``, https://platform.openai.com/docs/
guides/structured-outputs), which llama.cpp's server, Ollama, vLLM and LM Studio all
accept on ``/v1/chat/completions``. A grammar without a schema (the reflection's line
format) goes out unconstrained to such a backend; the lenient parsers read what comes
back either way.

Modes (``llm.structuredOutput`` and each ``llm.fallbacks`` entry's):

* ``auto`` -- the native llama-server API: GBNF; an OpenAI API: ``gbnf`` when the older
  ``grammar: true`` switch is on, else ``json_schema``; a server that refuses the field
  (HTTP 400/422 naming it) is asked again without it and never sent it again;
* ``gbnf`` -- llama.cpp's ``grammar`` field (the native API, or llama.cpp's OpenAI API);
* ``json_schema`` -- ``response_format`` on an OpenAI API (the native API keeps GBNF:
  it is llama.cpp's own constraint);
* ``none`` -- no constraint at all, on any API.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

__all__ = ["MODES", "Mode", "json_schema_of", "resolve_mode", "response_format",
           "with_schema"]

Mode = Literal["auto", "gbnf", "json_schema", "none"]
"""``llm.structuredOutput`` (the config type); the modes are its values."""
MODES: tuple[str, ...] = get_args(Mode)

_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {}


def with_schema(gbnf: str, name: str, schema: dict[str, Any]) -> str:
    """Register ``schema`` (a JSON Schema object, named ``name``: ``[a-zA-Z0-9_-]``, at
    most 64 characters as OpenAI requires) as the equivalent of the grammar ``gbnf`` and
    return ``gbnf`` unchanged. Builders are pure and cached, so the table only grows
    with the distinct grammars a process builds (a few dozen)."""
    _SCHEMAS[gbnf] = (name, schema)
    return gbnf


def json_schema_of(gbnf: str | None) -> tuple[str, dict[str, Any]] | None:
    """The ``(name, schema)`` registered for ``gbnf``; None when there is none."""
    return _SCHEMAS.get(gbnf) if gbnf else None


def resolve_mode(mode: str, *, native: bool, grammar_switch: bool = False) -> str:
    """The mode a backend starts in: ``gbnf``, ``json_schema`` or ``none`` (see the
    module docstring). ``native``: the llama-server API; ``grammar_switch``: the older
    ``grammar: true`` of an OpenAI backend. Raises ValueError for an unknown mode."""
    if mode not in MODES:
        raise ValueError(f"unknown structured output mode {mode!r}")
    if mode == "none":
        return "none"
    if native:
        return "gbnf"
    if mode == "auto":
        return "gbnf" if grammar_switch else "json_schema"
    return mode


def response_format(gbnf: str | None) -> dict[str, Any] | None:
    """OpenAI's ``response_format`` for the schema registered for ``gbnf``; None without
    one. ``strict`` is off: OpenAI's strict mode refuses a root ``anyOf`` (the agent's
    action is one of three objects); llama.cpp, Ollama and vLLM enforce the schema
    either way."""
    found = json_schema_of(gbnf)
    if found is None:
        return None
    name, schema = found
    return {"type": "json_schema",
            "json_schema": {"name": name, "schema": schema, "strict": False}}
