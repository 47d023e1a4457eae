"""The actors: agent, memory, reflection and backfill, and tools when MCP servers are
configured, each a module ``actors.<name>.actor`` with an ``open_actor`` the kernel
serves in its own process.

This floor sits between the shell (which composes and serves them) and the services
and kernel (which they use). May import ``runtime.services`` and ``runtime.kernel``;
never ``runtime.shell`` (import-linter contract in ``pyproject.toml``). Beside the
actors sit two libraries they share: the memory store (:mod:`actors.store`) and, below
it, the memory policy (:mod:`actors.policy`). Actors talk through each other's
``messages``, memory's op table (:mod:`actors.memory.ops`) and its typed client
(:mod:`actors.memory.client`) only; another import between two actors is refused by a
contract. Importing this package loads no HTTP client: an actor that talks to an LLM
gets httpx through :mod:`runtime.services`, which keeps httpx's command-line tool out.
"""

from __future__ import annotations

from runtime.kernel import ActorSpec
from runtime.services.config import Config

__all__ = ["ACTOR_NAMES", "OPTIONAL_ACTORS", "actor_names", "actor_spec"]

ACTOR_NAMES = ("memory", "agent", "reflection", "backfill")
"""The four actors every daemon runs."""
OPTIONAL_ACTORS = ("tools",)
"""Actors a daemon runs only when configured to: ``tools`` with an enabled server in
``tools.mcpServers`` (docs/tools.md)."""


def actor_names(cfg: Config) -> tuple[str, ...]:
    """The actors a daemon with ``cfg`` runs, in start order (memory first: it is
    stopped last)."""
    tools = any(s.enabled for s in cfg.tools.mcp_servers.values())
    return ACTOR_NAMES + (("tools",) if tools else ())


def actor_spec(name: str, **kw: object) -> ActorSpec:
    """The kernel's :class:`~runtime.kernel.ActorSpec` for actor ``name`` (one of
    :data:`ACTOR_NAMES`): its module is ``actors.<name>.actor``; ``kw`` are the spec's
    other fields (``config``, ``env``, ``nice``). Raises ValueError for another name."""
    if name not in ACTOR_NAMES + OPTIONAL_ACTORS:
        raise ValueError(f"no actor named {name!r}; the actors are "
                         f"{', '.join(ACTOR_NAMES + OPTIONAL_ACTORS)}")
    # kw are ActorSpec's own fields, of the types its annotations give (msgspec checks
    # them when the spec is encoded); ``object`` keeps the signature open to new ones.
    return ActorSpec(name=name, module=f"actors.{name}.actor", **kw)  # type: ignore[arg-type]
