"""The memory actor: the sole owner of ``memory.sqlite`` in the daemon.

Its wire contract is :mod:`.messages` (a leaf: talking to memory loads no store), the
op table :mod:`.ops` (each memory op's request Struct and reply type, and what every
surface needs of it) and the typed client :mod:`.client` every caller runs ops through;
:mod:`.router` answers each op over the store's engine interface
(:mod:`actors.store.engine`) with one ``match``, and :mod:`.actor` serves requests,
writes in a worker thread and announces what changed.
"""
