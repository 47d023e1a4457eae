"""Lone surrogates at the process's boundaries.

A Python ``str`` can hold code points U+D800..U+DFFF that no UTF-8 encoder accepts: a
JSON ``\\ud83d`` escape from a client that cut a string in the middle of an emoji
(JavaScript strings are UTF-16), or a ``surrogateescape`` code point standing for an
undecodable byte of an operating-system string (a file name, a path, an environment
value: ``"caf\\udce9"`` for the bytes ``caf`` 0xE9). msgspec, apsw and the websocket
refuse them with ``UnicodeEncodeError``, which would end a frame, a write or an actor.

The one policy, used wherever text leaves a process (the kernel's envelope codec, the
gateway's frames both ways, the OpenAI API): each lone surrogate becomes U+FFFD, the
replacement character, and the text goes on (nothing else of the message is lost);
:func:`repairs` counts every code point replaced in this process (metrics
``text.repaired``). A correctly paired escape (``\\ud83d\\ude00``) is a real character
and untouched. Paths are not repaired where they are used to open files: the daemon
hands the state directory to its actors losslessly (``ActorBoot.state_dir_raw``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

__all__ = ["encode_repaired", "has_lone_surrogates", "repair", "repair_json_escapes",
           "repair_tree", "repairs"]

T = TypeVar("T")

REPLACEMENT = "\ufffd"
_LONE = re.compile("[\ud800-\udfff]")
# In JSON text: an escaped backslash (skipped whole, so "\\\\ud83d" is not an escape),
# a high-surrogate escape with or without its low partner, or a low one alone.
_JSON_ESCAPE = re.compile(r"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}(?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
                          r"|\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_count = 0
_KEEP = (bytes, bytearray, memoryview, msgspec.Raw)


def repairs() -> int:
    """Lone surrogates replaced in this process so far."""
    return _count


def _note(n: int) -> None:
    global _count
    _count += n


def has_lone_surrogates(text: str) -> bool:
    """Whether ``text`` holds a code point no UTF-8 encoder accepts."""
    return _LONE.search(text) is not None


def repair(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (counted); unchanged, and
    the same object, when it holds none."""
    fixed, n = _LONE.subn(REPLACEMENT, text)
    if n:
        _note(n)
    return fixed


def repair_tree(value: Any) -> Any:
    """:func:`repair` applied to every string (keys included) of a tree of dicts,
    lists and tuples; other values are returned as they are."""
    if isinstance(value, str):
        return repair(value)
    if isinstance(value, dict):
        return {repair_tree(k): repair_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [repair_tree(v) for v in value]
    return value


def repair_json_escapes(text: str) -> str:
    """JSON text with each lone surrogate *escape* (``\\ud83d`` not followed by a low
    escape, or a low one alone) replaced by ``\\ufffd`` (counted); escaped backslashes
    and paired escapes are left as they are."""
    n = 0

    def fix(m: re.Match[str]) -> str:
        nonlocal n
        token = m.group()
        if token == "\\\\" or len(token) == 12:
            return token
        n += 1
        return "\\ufffd"

    fixed = _JSON_ESCAPE.sub(fix, text)
    if n:
        _note(n)
    return fixed


def encode_repaired(encode: Callable[[Any], T], value: Any) -> T:
    """``encode(value)``; when that fails on a lone surrogate, ``encode`` of
    ``msgspec.to_builtins(value)`` with every string repaired (the same wire shape: a
    Struct's builtins encode as the Struct does; bytes and ``Raw`` stay as they are).
    Other errors propagate."""
    try:
        return encode(value)
    except UnicodeEncodeError:
        return encode(repair_tree(msgspec.to_builtins(value, builtin_types=_KEEP)))
