"""``atomic-agent metrics`` in a person's words: what the daemon did
since it started — turns by outcome, reflections by outcome and skip reason (where to
look when memory is not forming), tool calls, recall modes — from the aggregated
``metrics.result`` (docs/protocol.md §3). ``metrics --json`` prints the whole result.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from actors.tools.messages import down_reason

from .cli_output import when

_KEY_RE = re.compile(r"^(?P<name>[^{]+)(?:\{(?P<labels>[^}]*)\})?$")

REFLECTION_SKIPS = {
    "trivial": "small talk", "question": "questions", "request": "requests",
    "tool_request": "requests a tool carried out", "impersonal": "nothing about you",
}


def by_label(counters: dict[str, int], name: str) -> dict[str, int]:
    """``{label value: count}`` of the counter ``name`` (its first label), biggest first."""
    out: dict[str, int] = defaultdict(int)
    for key, value in counters.items():
        m = _KEY_RE.match(key)
        if m is None or m.group("name") != name:
            continue
        labels = m.group("labels") or ""
        out[labels.split("=", 1)[1] if "=" in labels else "total"] += value
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _parts(counts: dict[str, int], names: dict[str, str] | None = None) -> str:
    return ", ".join(f"{(names or {}).get(k, k)} {v}" for k, v in counts.items())


def _mean_s(hist: dict[str, Any], name: str) -> str:
    h = hist.get(name)
    if not h or not h.get("count"):
        return ""
    ms = h["sum"] / h["count"]
    return f"; mean {ms / 1000:.1f} s" if ms >= 100 else f"; mean {ms:.0f} ms"


def _database_line(db: Any) -> str:
    """The memory database's state (the PostgreSQL engine's probe; "" on SQLite):
    up or away since when, and how many outages since the daemon started."""
    if not isinstance(db, dict):
        return ""
    outages = int(db.get("outages") or 0)
    since = f" since {when(db['since'])}" if isinstance(db.get("since"), int) else ""
    if db.get("up", True):
        state = "up" + (f"{since}; outages: {outages}" if outages else "")
    else:
        state = f"AWAY{since} ({db.get('problem') or 'no answer'}); outages: {outages}"
    return f"memory database ({db.get('engine', 'postgres')}): {state}"


def _servers_line(servers: Any) -> str:
    """The MCP servers' states (docs/tools.md; "" without the tools actor)."""
    if not isinstance(servers, list) or not servers:
        return ""
    parts = []
    for s in servers:
        if not isinstance(s, dict):
            continue
        state, name = s.get("state"), s.get("name")
        if state == "up":
            n = len(s.get("tools") or [])
            parts.append(f"{name} up ({n} tool{'s' if n != 1 else ''})")
        elif state == "down":
            why = down_reason(str(name), str(s.get("error")))
            parts.append(f"{name} DOWN ({why}; restarts {s.get('restarts', 0)})")
        else:
            parts.append(f"{name} {state}")
    return "MCP servers: " + "; ".join(parts)


def summarize(metrics: dict[str, Any]) -> str:
    """Lines of text for a ``metrics.result`` frame (without its ``type``)."""
    counters = metrics.get("counters", {})
    hist = metrics.get("histograms", {})
    lines = []
    turns = by_label(counters, "agent.turns")
    lines.append(f"turns: {sum(turns.values())}" + (f" ({_parts(turns)})" if turns else "")
                 + _mean_s(hist, "agent.turn.latency_ms"))
    reflections = by_label(counters, "agent.memory.reflection")
    skipped = by_label(counters, "agent.memory.reflection.skipped")
    dropped = by_label(counters, "agent.memory.reflection.dropped")
    text = f"reflections: {sum(reflections.values())}"
    if reflections:
        text += f" ({_parts(reflections)})"
    text += _mean_s(hist, "agent.memory.reflection.latency_ms")
    lines.append(text)
    if skipped:
        lines.append(f"  skipped without asking the model: {_parts(skipped, REFLECTION_SKIPS)}")
    if dropped:
        lines.append(f"  proposals dropped by the guards: {_parts(dropped)}")
    if not reflections and sum(turns.values()) != 0:
        lines.append("  (no reflection yet: memory.reflection.enabled, or still running)")
    tools = by_label(counters, "agent.tool_calls")
    refused = by_label(counters, "agent.tool_refused")
    lines.append(f"memory tool calls run: {_parts(tools) if tools else 'none'}")
    if refused:
        lines.append(f"  refused (not run): {_parts(refused)}")
    mcp = by_label(counters, "agent.tools.decided")
    if mcp:
        lines.append(f"calls of your MCP tools: {_parts(mcp)}"
                     + _mean_s(hist, "agent.tools.call_ms"))
    recall = by_label(counters, "agent.memory.recall")
    if recall:
        lines.append(f"recall: {_parts(recall)}")
    actors = metrics.get("actors", {})
    if line := _database_line(actors.get("memory", {}).get("database")):
        lines.append(line)
    if line := _servers_line(actors.get("tools", {}).get("servers")):
        lines.append(line)
    down = sorted(name for name, snap in actors.items() if "error" in snap)
    lines.append(f"actors: {len(actors) - len(down)} up" + (f", down: {', '.join(down)}"
                                                              if down else "")
                 + f"; restarts {metrics.get('restarts', 0)}; clients "
                   f"{metrics.get('clients', 0)}")
    return "\n".join(lines)
