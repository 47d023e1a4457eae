"""GBNF grammar that constrains the reflection completion (llama.cpp grammar syntax).

The output is ``NONE`` or a bounded list of ``SET`` / ``NOTE`` / ``FORGET`` lines.
Measured on the bundled small models, excluding ``<``, ``>``, ``[``, ``]`` and capping
lengths took the 1.5B model from 22 to 29 of 30 facts and halved the latency; free text
let them spam placeholder copies and ``[pinned=false; …]`` markers, with grammar
re-filtering of the 151k-token vocabulary costing up to 80 s. So this grammar is
*strict*: no markers, no brackets, short values.
There is no ``EVOLVE`` production: reflection writes facts, notes and forgets only.

Productions (bounds are in characters unless stated otherwise)::

    root    -> none | entries
    none    -> "NONE" optionally followed by one "\n"
    entries -> entry, 1 to 10 times
    entry   -> set | note | forget
    set     -> "SET " key "=" value "\n"
    note    -> "NOTE " body "\n"
    forget  -> "FORGET " target "\n"
    key     -> [a-z] then 0..31 of [a-z0-9_]   (keys are 1..32 chars, lower snake case)
    value   -> 1..60 chars, no CR/LF, no < > [ ]
    body    -> 1..120 chars, no CR/LF, no < > [ ]
    target  -> 1..60 chars, no CR/LF, no < > [ ]

On an OpenAI-compatible server the same shape goes out as a JSON schema,
``{"lines": [...]}`` with each line held to :data:`REFLECTION_LINE_PATTERN` (the
productions above as one regular expression, without ``"`` and ``\\``, see
:mod:`runtime.services.structured`); the backend joins the lines back into this text.

The parser (:mod:`actors.reflection.parser`) accepts more (a server that ignores the
grammar still has every line judged on its own), so a grammar-constrained completion is
never a line the parser must drop for length.

Repetition uses the bounded form ``x{m,n}`` that llama.cpp's GBNF parser accepts.

The constant is **byte-stable**: it is sent with every reflection request, and
llama-server caches compiled grammars per request text only, so any change here is a
protocol change (covered by a pinned hash in ``tests/test_reflection_prompt.py``).
"""

from __future__ import annotations

from runtime.services.structured import with_line_schema

__all__ = [
    "REFLECTION_GRAMMAR",
    "REFLECTION_LINE_PATTERN",
    "KEY_MAX_CHARS",
    "VALUE_MAX_CHARS",
    "BODY_MAX_CHARS",
    "TARGET_MAX_CHARS",
    "MAX_ENTRIES",
]

#: Longest profile key the grammar admits (chars).
KEY_MAX_CHARS = 32
#: Longest ``SET`` value the grammar admits (chars); short, as measured above.
VALUE_MAX_CHARS = 60
#: Longest ``NOTE`` body the grammar admits (chars); short, as measured above.
BODY_MAX_CHARS = 120
#: Longest ``FORGET`` target the grammar admits (chars).
TARGET_MAX_CHARS = 60
#: Most ``SET``/``NOTE``/``FORGET`` lines in one completion.
MAX_ENTRIES = 10

_TEXT = r'[^\r\n<>\[\]"\\]'
#: One reflection line as a regular expression (the schema form's ``pattern``).
REFLECTION_LINE_PATTERN = (f"NONE|SET [a-z][a-z0-9_]{{0,31}}={_TEXT}{{1,60}}|"
                           f"NOTE {_TEXT}{{1,120}}|FORGET {_TEXT}{{1,60}}")

#: The GBNF text sent as ``grammar`` in the reflection ``POST /completion`` body.
#: Byte-stable module constant (see module docstring); built from literal pieces only.

REFLECTION_GRAMMAR: str = with_line_schema((
    'root    ::= none | entries\n'
    'none    ::= "NONE" "\\n"?\n'
    'entries ::= entry{1,10}\n'
    'entry   ::= set | note | forget\n'
    'set     ::= "SET " key "=" value "\\n"\n'
    'note    ::= "NOTE " body "\\n"\n'
    'forget  ::= "FORGET " target "\\n"\n'
    'key     ::= [a-z] [a-z0-9_]{0,31}\n'
    'value   ::= [^\\r\\n<>\\[\\]]{1,60}\n'
    'body    ::= [^\\r\\n<>\\[\\]]{1,120}\n'
    'target  ::= [^\\r\\n<>\\[\\]]{1,60}\n'
), "reflection_lines", REFLECTION_LINE_PATTERN, max_lines=MAX_ENTRIES)
