"""The memory store library: everything memory is, over one SQLite file.

The schema and its migrations (:mod:`.schema`), the stores (:mod:`.profile` facts with
their history, :mod:`.notes`, :mod:`.lessons` and :mod:`.procedures` over one
:mod:`.distilled` base, :mod:`.links`, :mod:`.votes`, :mod:`.vectors`), keyword and
hybrid recall (:mod:`.fts`, :mod:`.recall`, :mod:`.hybrid`), near-duplicates and
corrections (:mod:`.dedup`, :mod:`.corrections`), the cold path (:mod:`.cold`),
forgetting and staleness, export/import and backup, a turn's context
(:mod:`.context` with the plans of :mod:`.plans`, rendered by :mod:`.render`), and one
way to open it all (:mod:`.stores`). The rows the wire carries are plain Structs in
:mod:`.records`.

A library, not an actor: the memory actor (:mod:`actors.memory`) is a router over it,
and the shell's offline commands, the benchmarks and the tests use it directly. It may
import the memory policy (:mod:`actors.policy`) and the services; never an actor
(import-linter contract in ``pyproject.toml``).
"""
