"""GBNF grammar that constrains the reflection completion (llama.cpp grammar syntax).

Sources: seed 000 §5.3 (output is ``NONE`` or a bounded list of ``SET`` / ``NOTE``
lines) and ``reference/anchor-behaviour.md`` §4.4 (the newest grammar, production by
production). The ``EVOLVE`` production of the anchor is deliberately absent: this
project's reflection writes facts and notes only (DESIGN §2 step 6).

Productions (bounds are in characters unless stated otherwise)::

    root    -> none | entries
    none    -> "NONE" optionally followed by one "\\n"
    entries -> entry, 1 to 6 times            (anchor §4.4: 1 mandatory + 5 optional)
    entry   -> set | note
    set     -> "SET " key "=" value "\\n"
    note    -> "NOTE " body "\\n"
    key     -> [a-z] then 0..31 of [a-z0-9_]   (keys are 1..32 chars, lower snake case)
    value   -> 1..200 chars other than CR/LF   (markers such as "[pinned=false; ...]"
                                                ride inside the value)
    body    -> 1..500 chars other than CR/LF   (an optional " [tags=a,b]" rides inside)

The limits mirror the parser (:mod:`actors.reflection.parser`): ``SET`` values over 200
chars are rejected there, ``NOTE`` bodies over 500 chars are cut there, so a server that
honours the grammar can never produce a line the parser must drop for length, and a
server that ignores it is still handled line by line.

Repetition is written with the bounded form ``x{m,n}`` which llama.cpp's GBNF parser
accepts (``grammar-parser``: ``{m}``, ``{m,}``, ``{m,n}``); the ``{0,31}`` / ``{1,200}`` /
``{1,500}`` / ``{1,6}`` bounds expand into nested optional rules server-side.

Carriage returns are excluded from ``value`` and ``body`` so a grammar-constrained
completion never contains a stray ``\\r`` in a stored fact.

The constant is **byte-stable**: it is sent with every reflection request, and
llama-server caches compiled grammars per request text only, so any change here is a
protocol change (covered by a pinned hash in ``tests/test_reflection_prompt.py``).
"""

from __future__ import annotations

__all__ = [
    "REFLECTION_GRAMMAR",
    "KEY_MAX_CHARS",
    "VALUE_MAX_CHARS",
    "BODY_MAX_CHARS",
    "MAX_ENTRIES",
]

#: Longest profile key the grammar admits (chars). Anchor §4.4 ``key``.
KEY_MAX_CHARS = 32
#: Longest ``SET`` value the grammar admits (chars). Anchor §4.4 ``value``.
VALUE_MAX_CHARS = 200
#: Longest ``NOTE`` body the grammar admits (chars). Anchor §4.4 ``body``.
BODY_MAX_CHARS = 500
#: Most ``SET``/``NOTE`` lines in one completion. Anchor §4.4 ``entries``.
MAX_ENTRIES = 6

#: The GBNF text sent as ``grammar`` in the reflection ``POST /completion`` body.
#: Byte-stable module constant (see module docstring); built from literal pieces only.
REFLECTION_GRAMMAR: str = (
    'root    ::= none | entries\n'
    'none    ::= "NONE" "\\n"?\n'
    'entries ::= entry{1,6}\n'
    'entry   ::= set | note\n'
    'set     ::= "SET " key "=" value "\\n"\n'
    'note    ::= "NOTE " body "\\n"\n'
    'key     ::= [a-z] [a-z0-9_]{0,31}\n'
    'value   ::= [^\\r\\n]{1,200}\n'
    'body    ::= [^\\r\\n]{1,500}\n'
)
