"""Structured output: which constraint a completion request carries, per backend.

Every caller that wants a shaped completion passes a GBNF grammar (llama.cpp's grammar
language, https://github.com/ggml-org/llama.cpp/blob/master/grammars/README.md). Where
the same shape can be said as a JSON schema, the grammar's builder registers that schema
with :func:`with_schema`, and a backend that speaks OpenAI's API sends the schema instead
(``response_format: {"type": "json_schema", ...}``, https://platform.openai.com/docs/
guides/structured-outputs), which llama.cpp's server, Ollama, vLLM and LM Studio all
accept on ``/v1/chat/completions``. A grammar without a schema goes out unconstrained
to such a backend; the lenient parsers read what comes back either way.

A grammar whose language is not JSON (the reflection's ``SET``/``NOTE``/``FORGET`` lines,
votes, links, the query rewriter's envelope, a distilled lesson) registers a schema with
a ``to_text`` function: the backend sends the schema, decodes the JSON that comes back and
hands the caller the grammar's own text (:func:`text_of`), so every parser reads one
language whichever constraint produced it. :func:`with_line_schema` is the common case:
``{"lines": ["SET name=Priya", ...]}``, each line held to a regular expression (ECMA-262,
as JSON Schema's ``pattern``; groups without ``?:`` and no look-around, which llama.cpp's
converter refuses). Patterns never admit ``"`` or ``\\``: llama.cpp's converter matches
them against the JSON-encoded text, where a bare quote would end the string.

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

import json
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

__all__ = ["MODES", "Mode", "SchemaForm", "json_schema_of", "resolve_mode",
           "response_format", "schema_form", "text_of", "with_line_schema", "with_schema"]

Mode = Literal["auto", "gbnf", "json_schema", "none"]
"""``llm.structuredOutput`` (the config type); the modes are its values."""
MODES: tuple[str, ...] = get_args(Mode)

SCHEMA_TABLE_SIZE = 256
"""Most grammars remembered with their schema (least recently registered dropped first):
the vote and link grammars are built per call over the ids at hand."""


@dataclass(frozen=True)
class SchemaForm:
    """A grammar's JSON-schema form. ``name``: ``[a-zA-Z0-9_-]``, at most 64 characters
    (OpenAI's rule); ``schema``: a JSON Schema object; ``to_text``: the decoded JSON
    value -> the grammar's own text, or None when the grammar's language is that JSON
    (the agent's action); ``extra_tokens``: tokens the JSON adds to an answer (quotes,
    brackets, keys), added to ``max_tokens`` when the schema is sent."""

    name: str
    schema: dict[str, Any]
    to_text: Callable[[Any], str | None] | None = None
    extra_tokens: int = 0


_SCHEMAS: OrderedDict[str, SchemaForm] = OrderedDict()


def with_schema(gbnf: str, name: str, schema: dict[str, Any], *,
                to_text: Callable[[Any], str | None] | None = None,
                extra_tokens: int = 0) -> str:
    """Register ``schema`` as the equivalent of the grammar ``gbnf`` (see
    :class:`SchemaForm` for the arguments) and return ``gbnf`` unchanged. The table keeps
    the :data:`SCHEMA_TABLE_SIZE` most recently registered grammars."""
    _SCHEMAS[gbnf] = SchemaForm(name, schema, to_text, extra_tokens)
    _SCHEMAS.move_to_end(gbnf)
    while len(_SCHEMAS) > SCHEMA_TABLE_SIZE:
        _SCHEMAS.popitem(last=False)
    return gbnf


def with_line_schema(gbnf: str, name: str, line: str, *, max_lines: int,
                     min_lines: int = 0, empty: str = "NONE") -> str:
    """Register ``{"lines": [...]}`` as the form of a line grammar: 0..``max_lines``
    strings, each matching ``^(line)$`` (a regular expression, see the module
    docstring). The lines come back joined by newlines; no line gives ``empty``.
    Returns ``gbnf``."""
    schema = {"type": "object", "additionalProperties": False, "required": ["lines"],
              "properties": {"lines": {"type": "array", "minItems": min_lines,
                                       "maxItems": max_lines,
                                       "items": {"type": "string", "pattern": f"^({line})$"}}}}

    def to_text(value: Any) -> str | None:
        lines = value.get("lines") if isinstance(value, dict) else None
        if not isinstance(lines, list):
            return None
        kept = [x.strip() for x in lines if isinstance(x, str) and x.strip()]
        return "\n".join(kept) + "\n" if kept else empty

    return with_schema(gbnf, name, schema, to_text=to_text, extra_tokens=8 + 4 * max_lines)


def schema_form(gbnf: str | None) -> SchemaForm | None:
    """The :class:`SchemaForm` registered for ``gbnf``; None when there is none."""
    return _SCHEMAS.get(gbnf) if gbnf else None


def json_schema_of(gbnf: str | None) -> tuple[str, dict[str, Any]] | None:
    """The ``(name, schema)`` registered for ``gbnf``; None when there is none."""
    form = schema_form(gbnf)
    return (form.name, form.schema) if form is not None else None


_FENCE_RE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_STRING_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def _partial_lines(text: str) -> dict[str, Any] | None:
    """The complete strings of a ``{"lines": [...`` answer cut off at ``max_tokens``;
    None when ``text`` does not open that shape."""
    head, sep, rest = text.partition('"lines"')
    if not sep or head.strip() != "{":
        return None
    rest = rest.lstrip().removeprefix(":").lstrip().removeprefix("[")
    lines: list[str] = []
    while True:
        rest = rest.lstrip(" ,\n\t\r")
        m = _STRING_RE.match(rest)
        if m is None:
            return {"lines": lines}
        lines.append(json.loads(m.group()))
        rest = rest[m.end():]


def text_of(gbnf: str | None, text: str) -> str:
    """The grammar's own text for a completion ``text`` that may be its schema's JSON
    (see the module docstring): the JSON decoded (a code fence around it allowed; a line
    answer cut off at ``max_tokens`` keeps its complete lines) and turned back by the
    form's ``to_text``. Anything else -- a server that ignored the schema and wrote the
    grammar's text, prose, no registered form -- comes back unchanged. Never raises."""
    form = schema_form(gbnf)
    if form is None or form.to_text is None:
        return text
    body = _FENCE_RE.sub("", text.strip())
    if not body.startswith("{"):
        return text
    value: Any
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        try:
            value = _partial_lines(body)
        except ValueError:  # a bad escape in a cut-off string
            value = None
    try:
        out = form.to_text(value) if value is not None else None
    except (TypeError, ValueError, AttributeError):
        out = None
    return text if out is None else out


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
    form = schema_form(gbnf)
    if form is None:
        return None
    return {"type": "json_schema",
            "json_schema": {"name": form.name, "schema": form.schema, "strict": False}}
