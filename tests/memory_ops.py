"""Memory ops from a test that holds the supervisor: by name and JSON arguments (as a
``memory`` frame carries them), answered as JSON data (as a client reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from actors.memory import ops
from actors.memory.client import actor_memory
from actors.memory.ops import decode_op


@dataclass(frozen=True)
class Answer:
    """An op's reply as JSON data (``data``)."""

    data: Any


async def memory_op(sup: Any, name: str, args: dict[str, Any] | None = None,
                    **asker: Any) -> Answer:
    """Run op ``name`` through the memory actor (``asker``: ``source``, ``session``,
    ``turn``, ``client`` … as :func:`actors.memory.client.actor_memory` takes them)."""
    reply = await actor_memory(sup.request, **asker).run(decode_op(name, args or {}))
    return Answer(msgspec.to_builtins(reply))


async def memory_stats(sup: Any) -> dict[str, Any]:
    """``memory.stats`` as JSON data."""
    return await actor_memory(sup.request).run(ops.Stats())
