"""Services: what the actors and the shell both use, and nothing that knows an actor.

* :mod:`.config` / :mod:`.config_edit` -- the configuration schema (``config.json``,
  camelCase keys, defaults, validation with the offending key path) and its editing
  (``atomic-agent config get/set/unset``).
* :mod:`.llm` -- the llama-server native API client (completion, streaming, props,
  slots, error shapes); :mod:`.backends` -- the backends behind one interface
  (llama-server, OpenAI-compatible, a sticky fallback between them).
* :mod:`.llama` / :mod:`.llama_portable` -- supervising the embedded llama-server
  process and choosing the build that runs on this CPU; :mod:`.models` -- model files
  (registry packages, verification, cache).
* :mod:`.metrics` -- counters and histograms each process keeps and reports.

May import: the kernel (``runtime.kernel``) and libraries. Never ``actors`` or
``runtime.shell`` (import-linter contract in ``pyproject.toml``).
"""

