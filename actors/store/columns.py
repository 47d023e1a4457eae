"""The store's JSON columns: lists of tags, keywords and ids are stored as JSON text
(SQLite's ``json_each`` reads them in queries); one encoder and one forgiving decoder
serve every store."""

from __future__ import annotations

from typing import TypeVar

import msgspec

_T = TypeVar("_T")


def decode_json_list(raw: str | None, decoder: msgspec.json.Decoder[list[_T]]) -> list[_T]:
    """Decode a JSON array column; ``[]`` for NULL, empty or malformed text."""
    if not raw:
        return []
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError:
        return []


def encode_json(value: object) -> str:
    """Encode a value as compact JSON text (for the JSON columns)."""
    return msgspec.json.encode(value).decode()
