"""The project's own clients speak typed frames: they send ``runtime.shell.protocol``
Structs and read ``runtime.shell.outbound`` ones; only the JSON-object client kept for
scripts and tests (``WireClient``) writes frames as dicts."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import msgspec

from runtime.shell import outbound, protocol
from runtime.shell.outbound import decode_outbound

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "runtime" / "shell" / "client.py"
CLIENT_TAGS = {cls.__struct_config__.tag for cls in typing.get_args(protocol.ClientFrame)}
OUTBOUND_TAGS = {cls.__struct_config__.tag for cls in typing.get_args(outbound.OutboundFrame)}


def _hand_built(path: Path) -> list[str]:
    """Dict literals shaped like a protocol frame (``{"type": <a frame's tag>, …}``), and
    uses of the JSON-object client, in one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if (isinstance(key, ast.Constant) and key.value == "type"
                        and isinstance(value, ast.Constant)
                        and value.value in CLIENT_TAGS | OUTBOUND_TAGS):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {value.value!r}")
        elif isinstance(node, ast.Name) and node.id in ("WireClient", "open_client"):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.id}")
        elif isinstance(node, ast.alias) and node.name in ("WireClient", "open_client"):
            found.append(f"{path.relative_to(ROOT)}: imports {node.name}")
    return found


def test_no_product_module_builds_a_frame_by_hand() -> None:
    found = [hit for root in ("actors", "runtime")
             for path in sorted((ROOT / root).rglob("*.py")) if path != CLIENT
             for hit in _hand_built(path)]
    assert not found, "send protocol.py Structs, read outbound.py ones:\n" + "\n".join(found)


def test_the_check_finds_a_hand_built_frame(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('FRAME = {"type": "say", "text": "hi"}\n'
                      'ASGI = {"type": "http.response.start", "status": 200}\n')
    assert [hit.split(" ", 1)[1] for hit in _hand_built_in(sample)] == ["'say'"]


def _hand_built_in(path: Path) -> list[str]:
    global ROOT
    saved, ROOT = ROOT, path.parent
    try:
        return _hand_built(path)
    finally:
        ROOT = saved


def test_every_client_frame_round_trips_and_every_daemon_frame_decodes() -> None:
    say = protocol.Say(text="hi", recalled=[1])
    assert protocol.decode_frame(msgspec.json.encode(say)) == say
    hello = protocol.Hello(token="t", client="cli")
    assert protocol.decode_frame(msgspec.json.encode(hello)) == hello
    for frame in (outbound.Welcome(session="s", version=protocol.PROTOCOL_VERSION, created=True),
                  outbound.ErrorFrame(code="busy", message="a turn runs", id=None),
                  outbound.MemoryResult(id="m1", ok=True, data=[{"id": 1}])):
        assert decode_outbound(msgspec.json.encode(frame)) == frame


async def test_a_script_opens_the_typed_client_with_a_string_path(tmp_path: Path) -> None:
    """What a script writes (docs/protocol.md): ``open_daemon("/path/to/state")`` with a
    plain string, typed replies back; with neither a state dir nor a url, a clear error."""
    import pytest

    from actors.memory import ops
    from actors.store.records import ProfileFact
    from runtime.shell.client import open_daemon
    from tests.daemon import run_daemon
    from tests.fakes.llama_server import open_fake_llama

    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(state, llm_url=fake.url):
            async with open_daemon(str(state)) as c:
                await c.run(ops.ProfileSet(key="city", value="Porto"))
                facts = await c.run(ops.ProfileList())
    assert [(type(f), f.key, f.value) for f in facts] == [(ProfileFact, "city", "Porto")]
    with pytest.raises(ValueError, match="state_dir, or its url and token"):
        async with open_daemon():
            pass
