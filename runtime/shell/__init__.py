"""The shell: the daemon's composition root and every way a person or a program reaches it.

* Serving: :mod:`.daemon` (``serve``: state directory, llama-server, actors under the
  kernel's supervisor, shutdown), :mod:`.gateway` (the websocket gateway, frames to
  actor messages and back) with :mod:`.protocol` (frame schemas), :mod:`.openai_api`
  (the OpenAI-compatible HTTP API), :mod:`.state` (the state directory's files).
* Clients: :mod:`.client` (the websocket client library), :mod:`.daemon_link` (a
  reconnecting link for long-lived clients), :mod:`.mcp_server` (``atomic-agent mcp``),
  :mod:`.tui` (the terminal UI).
* The CLI: :mod:`.cli` (argument parsing, dispatch) and its parts :mod:`.cli_turns`,
  :mod:`.cli_output`, :mod:`.cli_consolidate`, :mod:`.memory_feedback`,
  :mod:`.status_line`, :mod:`.metrics_summary`.
* Offline tools, run without a daemon: :mod:`.offline` (memory ops on the database
  file), :mod:`.recover` (salvage a damaged database), :mod:`.reindex` (re-embed).

May import every floor below: ``actors`` (their message types and, for the offline
tools, the memory store itself), ``runtime.services`` and ``runtime.kernel``. Nothing
imports the shell (import-linter contract in ``pyproject.toml``).
"""

from runtime.kernel.lean_imports import import_hiding as _import_hiding

_import_hiding("httpx", ("httpx._main",))  # its CLI stays out (runtime.kernel.lean_imports)
