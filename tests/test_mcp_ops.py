"""Every MCP tool is one memory op of the op table, with arguments the op accepts.

The MCP server (:mod:`runtime.shell.mcp_server`) is a curated face of the memory ops:
its own names, titles and argument descriptions for MCP clients. This holds it to the
op table (:data:`actors.memory.ops.OPS`): each tool, called with its required arguments
and then with every optional one, sends an op the table has, with arguments the op's
request Struct accepts (:func:`actors.memory.ops.decode_op`), so the two cannot drift
apart.
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from actors.memory.ops import OPS, MemoryOp, args_of, decode_op
from runtime.shell.client import ClientError
from runtime.shell.mcp_server import build_server

SAMPLES = {"string": "Lisbon", "integer": 1, "boolean": True, "array": ["travel"]}


class RecordingLink:
    """Stands in for the daemon link: records each op and refuses it (what comes back is
    not this test's subject)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.client: str | None = None  # (the MCP server names its client here)

    async def run_op(self, request: MemoryOp[Any]) -> Any:
        self.calls.append((request.name, args_of(request)))
        raise ClientError("recorded", request.name)


def sample(schema: dict[str, Any]) -> Any:
    """A value of a property's JSON schema (``anyOf`` with null: the non-null type)."""
    if "enum" in schema:
        return schema["enum"][0]
    for option in schema.get("anyOf", []):
        if option.get("type") != "null":
            return sample(option)
    return SAMPLES[schema["type"]]


async def test_every_mcp_tool_sends_an_op_the_op_table_accepts() -> None:
    link = RecordingLink()
    server = build_server(link)  # type: ignore[arg-type]
    tools = await server.list_tools()
    assert tools
    for tool in tools:
        props = tool.input_schema.get("properties", {})
        required = tool.input_schema.get("required", [])
        for names in (required, list(props)):
            link.calls.clear()
            with pytest.raises(ToolError, match="^recorded: "):
                await server.call_tool(tool.name, {n: sample(props[n]) for n in names})
            assert len(link.calls) == 1, (tool.name, link.calls)
            op, args = link.calls[0]
            assert op in OPS, (tool.name, op)
            decode_op(op, args)  # raises ValidationError naming a field the op refuses
