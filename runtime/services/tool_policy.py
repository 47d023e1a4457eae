"""Each MCP tool's standing policy — allow, ask or deny — bound to the tool's pin
(docs/tools.md, "Approvals").

Kept in ``<state>/tool-policies.json`` (mode 0600), one entry per tool by its qualified
name (``git.git_commit``)::

    {"version": 1,
     "tools": {"git.git_commit": {"policy": "allow", "pin": "<64 hex>", "at": 1765000000000,
                                  "by": "owner"}}}

:func:`standing` says what holds for a tool now:

* no entry: ``allow`` for a tool its server marks read-only (``readOnlyHint``), else
  ``ask`` — nothing that may change anything runs without a yes;
* an entry whose pin is the tool's pin: its policy;
* an entry whose pin differs (the description or schema changed since it was
  decided): ``ask`` again — except ``deny``, which stays (a changed tool is no reason
  to trust it more).

A file that cannot be read as such a document is an error naming the file
(:class:`PolicyError`), never a silent "allow everything".
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Literal

import msgspec

from .tool_spec import ToolSpec

__all__ = ["POLICY_FILE", "Policy", "PolicyBook", "PolicyEntry", "PolicyError", "Standing",
           "standing", "what_changed"]

POLICY_FILE = "tool-policies.json"

Policy = Literal["allow", "ask", "deny"]


class PolicyError(Exception):
    """``tool-policies.json`` cannot be read or written (the message names it)."""


class PolicyEntry(msgspec.Struct, frozen=True):
    """One decided tool: its ``policy``, the ``pin`` it was decided for, when (unix
    ms) and by whom (a client's name, ``owner``, ``cli``, ``dashboard``);
    ``description_sha`` / ``schema_sha``: SHA-256 of the description and of the schema
    it was decided for (:func:`what_changed`; empty in entries written before them)."""

    policy: Policy
    pin: str
    at: int
    by: str = "owner"
    description_sha: str = ""
    schema_sha: str = ""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _shas(spec: ToolSpec) -> tuple[str, str]:
    schema = json.dumps(spec.input_schema, sort_keys=True, separators=(",", ":"),
                        ensure_ascii=False)
    return _sha(spec.description), _sha(schema)


def what_changed(spec: ToolSpec, entry: PolicyEntry) -> str:
    """What of ``spec`` differs from what ``entry`` was decided for: ``"description"``,
    ``"arguments"``, ``"description and arguments"``, ``""`` when nothing does (the
    pins match), or ``"description or arguments"`` for an entry that does not say."""
    if entry.pin == spec.pin:
        return ""
    if not entry.description_sha or not entry.schema_sha:
        return "description or arguments"
    described, shaped = _shas(spec)
    parts = [name for name, old, new in (("description", entry.description_sha, described),
                                          ("arguments", entry.schema_sha, shaped))
             if old != new]
    return " and ".join(parts) or "description or arguments"


class _File(msgspec.Struct):
    version: int = 1
    tools: dict[str, PolicyEntry] = msgspec.field(default_factory=dict)


class Standing(msgspec.Struct, frozen=True):
    """What holds for a tool now (:func:`standing`): ``policy`` and why (``reason``:
    ``default-read-only``, ``default``, ``decided``, ``changed``)."""

    policy: Policy
    reason: Literal["default-read-only", "default", "decided", "changed"]


def standing(spec: ToolSpec, entry: PolicyEntry | None) -> Standing:
    """The policy in force for ``spec`` given its decided ``entry`` (module docstring)."""
    if entry is None:
        return Standing("allow", "default-read-only") if spec.read_only \
            else Standing("ask", "default")
    if entry.pin == spec.pin:
        return Standing(entry.policy, "decided")
    return Standing("deny" if entry.policy == "deny" else "ask", "changed")


class PolicyBook:
    """``<state>/tool-policies.json``, read at construction (missing: empty). Raises
    PolicyError for a file that is not such a document."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / POLICY_FILE
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            self._data = _File()
            return
        except OSError as exc:
            raise PolicyError(f"{self.path}: cannot read it ({exc.strerror or exc})") from None
        try:
            self._data = msgspec.json.decode(raw, type=_File)
        except msgspec.DecodeError as exc:
            raise PolicyError(f"{self.path}: not a tool policy file ({exc}); fix it or "
                              "remove it (every tool then asks again)") from None

    def entry(self, qualified: str) -> PolicyEntry | None:
        """The decided entry of tool ``qualified`` (``server.tool``), or None."""
        return self._data.tools.get(qualified)

    def entries(self) -> dict[str, PolicyEntry]:
        """Every decided tool, by qualified name."""
        return dict(self._data.tools)

    def decide(self, spec: ToolSpec, policy: Policy, by: str = "owner") -> PolicyEntry:
        """Record ``policy`` for ``spec`` at its current pin and save the file."""
        described, shaped = _shas(spec)
        entry = PolicyEntry(policy, spec.pin, int(time.time() * 1000), by, described, shaped)
        self._data.tools[spec.qualified] = entry
        self._save()
        return entry

    def forget_server(self, server: str) -> int:
        """Drop every decision about ``server``'s tools (the server was removed); how
        many were dropped."""
        gone = [q for q in self._data.tools if q.split(".", 1)[0] == server]
        for q in gone:
            del self._data.tools[q]
        if gone:
            self._save()
        return len(gone)

    def _save(self) -> None:
        text = json.dumps(msgspec.to_builtins(self._data), indent=2) + "\n"
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(tmp, self.path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise PolicyError(f"{self.path}: cannot write it ({exc.strerror or exc})") from None
