"""Benchmarks for the performance targets (docs/architecture.md §10); figures go to
``bench/RESULTS.md``."""
