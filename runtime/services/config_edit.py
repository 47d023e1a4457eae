"""``atomic-agent config get|set|unset``: read and edit ``config.json`` by key path.

Keys are the dotted camelCase paths ``config show`` prints (``memory.reflection.timeoutMs``,
``server.allowedOrigins``). A value is read as JSON when it parses (``60000``, ``true``,
``["http://localhost:3000"]``, ``null``), else as a string (``helix``). The whole new file
is validated exactly as ``serve`` validates it before it replaces the old one (a temporary
file renamed into place, mode 0600), so a bad value is one error and the file is left as
it was. An unknown key names the nearest valid ones (``difflib``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec

from .config import Config, ConfigError, key_paths, parse_config, unknown_key


def parse_value(text: str) -> Any:
    """``text`` as JSON when it parses, else the string itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def get_value(cfg: Config, path: str) -> Any:
    """The effective value at ``path`` (a dict for a block). ConfigError: unknown key."""
    node: Any = msgspec.to_builtins(cfg)
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise unknown_key(path)
        node = node[part]
    return node


def _read_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot edit it ({exc}); fix or remove the file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the file is not a JSON object; fix or remove it")
    return data


def _prune(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without the blocks an unset left empty."""
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            value = _prune(value)
            if not value:
                continue
        out[key] = value
    return out


def _write_file(path: Path, data: dict[str, Any]) -> Config:
    data = _prune(data)
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    try:
        cfg = parse_config(text, source="refused")  # validated as serve validates it
    except ConfigError as exc:
        raise ConfigError(f"{exc}; {path.name} is unchanged") from None
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"{path}: cannot write it ({exc.strerror or exc})") from None
    return cfg


def set_value(state_dir: Path, path: str, value: Any) -> Config:
    """Set ``path`` to ``value`` in ``<state_dir>/config.json`` (created when missing) and
    return the new effective config. ConfigError: unknown key, a value the key does not
    accept (the message names the key and what it expects), an unreadable file."""
    if path not in key_paths():
        get_value(Config(), path)  # a block (e.g. "memory") is not settable as a whole
        raise ConfigError(f"{path!r} is a block of settings; set one of its keys")
    file = state_dir / "config.json"
    data = _read_file(file)
    node = data
    parts = path.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{file}: {part} is not a JSON object; fix the file")
        node = child
    node[parts[-1]] = value
    return _write_file(file, data)


def unset_value(state_dir: Path, path: str) -> tuple[Config, bool]:
    """Remove ``path`` from config.json (back to its default); returns (config, whether
    the file had it). ConfigError: unknown key."""
    get_value(Config(), path)
    file = state_dir / "config.json"
    data = _read_file(file)
    node: Any = data
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or parts[-1] not in node:
        return parse_config(json.dumps(data)), False
    del node[parts[-1]]
    return _write_file(file, data), True


def set_entry(state_dir: Path, block: str, name: str, value: dict[str, Any]) -> Config:
    """Set entry ``name`` of the named-entries block ``block`` (``tools.mcpServers``)
    to ``value`` in config.json, validated as ``serve`` validates it; the new effective
    config. ConfigError as :func:`set_value`."""
    get_value(Config(), block)  # an unknown block is refused, naming the nearest
    file = state_dir / "config.json"
    data = _read_file(file)
    node = data
    for part in block.split("."):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{file}: {part} is not a JSON object; fix the file")
        node = child
    node[name] = value
    return _write_file(file, data)


def remove_entry(state_dir: Path, block: str, name: str) -> bool:
    """Remove entry ``name`` of block ``block`` from config.json; whether it was there.
    ConfigError as :func:`set_value`."""
    file = state_dir / "config.json"
    data = _read_file(file)
    node: Any = data
    for part in block.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or name not in node:
        return False
    del node[name]
    _write_file(file, data)
    return True
