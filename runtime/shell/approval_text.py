"""What a person reads before answering a tool call's approval request (docs/tools.md):
the same words in ``ask``/``chat`` (:mod:`runtime.shell.cli_turns`) and the TUI's dialog
(:mod:`runtime.shell.tui.dialogs`)."""

from __future__ import annotations

import json

from actors.agent.messages import ApprovalRequest

__all__ = ["approval_text"]

_WHY = {"changed": "its description or arguments CHANGED since you decided",
        "after_tool_result": "proposed after a tool's output, and your message did not ask "
                             "for it"}


def approval_text(frame: ApprovalRequest) -> str:
    """The call, its arguments (cut to 600 characters), the tool's description (first
    200 characters, on one line) and why it asks when that is not simply its policy."""
    args = json.dumps(frame.args, ensure_ascii=False)
    lines = [f"The agent wants to run {frame.server}.{frame.tool} {args[:600]}"
             + ("…" if len(args) > 600 else "")]
    described = " ".join(frame.description.split())
    if described:
        lines.append(f"  {frame.server}.{frame.tool}: {described[:200]}"
                     + ("…" if len(described) > 200 else ""))
    if frame.why in _WHY:
        lines.append(f"  it asks because it was {_WHY[frame.why]}")
    return "\n".join(lines)
