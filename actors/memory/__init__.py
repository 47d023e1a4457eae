"""The memory actor: the sole owner of ``memory.sqlite`` in the daemon.

Its wire contract is :mod:`.messages` (a leaf: talking to memory loads no store) and the
op table :mod:`.ops` (each memory op's argument Struct); :mod:`.router` holds one
handler per op over the store library (:mod:`actors.store`), and :mod:`.actor` serves
requests, writes in a worker thread and announces what changed.
"""
