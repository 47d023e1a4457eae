"""The memory store library: everything memory is, over one SQLite file.

The schema and its migrations (:mod:`.schema`), the stores (:mod:`.profile` facts with
their history, :mod:`.notes`, :mod:`.lessons` and :mod:`.procedures` over one
:mod:`.distilled` base, :mod:`.links`, :mod:`.votes`, :mod:`.vectors`), keyword and
hybrid recall (:mod:`.fts`, :mod:`.recall`, :mod:`.hybrid`), near-duplicates and
corrections (:mod:`.dedup`, :mod:`.corrections`), the cold path (:mod:`.cold`),
forgetting and staleness, export/import and backup, a turn's context
(:mod:`.context` with the plans of :mod:`.plans`, rendered by :mod:`.tail`), and one
way to open it all (:mod:`.stores`). The rows the wire carries are plain Structs in
:mod:`.records`.

Two parts, held apart by import-linter contracts (``pyproject.toml``):

* **the pure core** — the records (:mod:`.records`), a turn's context as the prompt
  tail's sections (:mod:`.tail`, over :mod:`.render`, :mod:`.focus`, :mod:`.person`,
  :mod:`.dates`), the plans and budgets (:mod:`.plans`), tokenising (:mod:`.fts`), the
  text rules of stale notes (:mod:`.old_values`), the error types (:mod:`.errors`) and
  the clock: no SQL library, no module of the engine. The agent, reflection and backfill
  processes load only these (a test checks what a fresh process loads);
* **the SQLite engine** — every other module: the schema, the stores, recall, the cold
  path, forgetting, transfer and backup. Only the memory actor, the shell's offline
  commands, the benchmarks and the tests load it.

A library, not an actor: the memory actor (:mod:`actors.memory`) is a router over it.
It may import the memory policy (:mod:`actors.policy`) and the services; never an actor.
"""
