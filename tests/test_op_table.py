"""The op table is the one list of memory ops: every surface is made from it, and no
product module names an op by a string of its own."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import msgspec
import pytest

from actors.memory import ops
from actors.memory.ops import OPS, MemoryRequest, args_of, decode_op, reply_of
from actors.store.errors import ValidationError

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "actors" / "memory" / "ops.py"


def _op_literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in OPS]


def test_no_module_outside_the_table_names_an_op_by_a_string() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}: {value!r}"
             for root in ("actors", "runtime")
             for path in sorted((ROOT / root).rglob("*.py")) if path != TABLE
             for line, value in _op_literals(path)]
    assert not found, ("name ops by their class (ops.ProfileSet.name, ops.ProfileSet(...)), "
                       "not by a string:\n" + "\n".join(found))


def test_the_check_finds_a_literal(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('OP = "memory.profile.set"\nTEXT = "call memory.profile.set"\n')
    assert _op_literals(sample) == [(1, "memory.profile.set")]


def test_the_union_holds_every_op_and_each_reply_type_is_known() -> None:
    assert set(typing.get_args(MemoryRequest)) == set(OPS.values())
    for name, cls in OPS.items():
        assert cls.name == name and cls.summary and cls.reply is not None, name
        assert cls.access in ("read", "write", "forget", "admin", "team:write"), name
        assert cls.writes or cls.access in ("read", "admin"), name
        assert cls.guard is None or cls.tool, name


@pytest.mark.parametrize("name", sorted(OPS))
def test_a_request_round_trips_through_a_frame_and_a_tool_envelope(name: str) -> None:
    schema = ops.args_schema(OPS[name])
    sample = {"string": "x", "integer": 1, "boolean": True, "number": 0.5}
    args = {k: sample[schema["properties"][k]["type"]] for k in schema["required"]}
    request = decode_op(name, args)
    assert decode_op(name, args_of(request)) == request
    encoded = msgspec.msgpack.encode(request)
    assert msgspec.msgpack.decode(encoded, type=MemoryRequest) == request


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValidationError, match="^key: "):
        decode_op(ops.ProfileSet.name, {"value": "x"})
    with pytest.raises(ValidationError, match="^id: "):
        decode_op(ops.NotesGet.name, {"id": "seven"})
    with pytest.raises(ValidationError, match="^op: unknown memory operation"):
        decode_op("memory.nothing", {})
    with pytest.raises(ValidationError, match="^content: .*surrogate"):
        decode_op(ops.NotesStore.name, {"content": "\udcff"})


def test_a_reply_is_checked_against_the_op_reply_type() -> None:
    assert reply_of(ops.NotesForget(id=1), {"removed": True}) == ops.Removed(True)
    with pytest.raises(msgspec.ValidationError):
        reply_of(ops.NotesForget(id=1), [{"id": 1}])


def test_scopes_and_tools_come_from_the_table() -> None:
    from runtime.shell.clients import op_scope
    from runtime.shell.mcp_server import mcp_ops

    assert {n: op_scope(n) for n in OPS} == {n: c.access for n, c in OPS.items()}
    assert op_scope("memory.nothing") == "read"
    assert set(mcp_ops()) == {n.replace(".", "_") for n, c in OPS.items() if c.mcp}
    assert ops.TOOL_NAMES == tuple(n for n, c in OPS.items() if c.tool)
