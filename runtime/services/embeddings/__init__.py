"""Embedding clients: the model catalog and vector helpers (:mod:`.embedder`), the
in-process MiniLM int8 embedder (:mod:`.minilm`, vocabulary in ``data/``), and the
providers behind one interface (:mod:`.providers`: in-process, or an embedding server
over HTTP). A service: the memory actor embeds queries with it, the backfill actor
embeds notes, the shell's ``reindex`` re-embeds offline.
"""
