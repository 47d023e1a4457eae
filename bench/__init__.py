"""Benchmarks for the numbers of DESIGN §12; figures go to ``bench/RESULTS.md``."""
