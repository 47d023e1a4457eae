"""One MCP tool as the daemon knows it, and its pin (docs/tools.md).

Pure: no MCP client here, so a message that carries tools (the tools actor's) loads no
SDK. :func:`pin_of` is what an approval is bound to (:mod:`.tool_policy`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import msgspec

__all__ = ["ToolSpec", "pin_of"]


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One tool of one server.

    Attributes:
        server: the server's name in ``tools.mcpServers``.
        name: the tool's own name on that server.
        description: its description, as the server gives it (untrusted text).
        input_schema: its JSON schema for arguments (a JSON object).
        read_only: the server's ``readOnlyHint`` (a claim, not a guarantee).
        destructive: the server's ``destructiveHint`` (default true, as in the
            specification, for a tool that is not read-only).
        pin: :func:`pin_of` this tool (64 hex digits).
    """

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = False
    destructive: bool = True
    pin: str = ""

    @property
    def qualified(self) -> str:
        """``<server>.<tool>``: the name the agent and the approvals use."""
        return f"{self.server}.{self.name}"


def pin_of(server: str, name: str, description: str, input_schema: dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``[server, name, description, schema]``
    (keys sorted, no spaces): any change to what the model is shown changes it."""
    canonical = json.dumps([server, name, description, input_schema], sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
