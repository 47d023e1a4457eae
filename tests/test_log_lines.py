"""Log records stay whole lines when several processes share one stderr (the daemon's
actors do): a newcomer saw two actors' JSON records joined on one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.daemon import REPO

CHILD = """
import structlog
from runtime.kernel._log import configure
configure("{name}")
log = structlog.get_logger()
for i in range(400):
    log.info("tick", n=i, padding="x" * 200)
"""


def test_two_processes_logging_at_once_never_join_their_lines():
    read, write = os.pipe()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # each print() piece its own write
    procs = [subprocess.Popen([sys.executable, "-c", CHILD.format(name=name)], cwd=REPO,
                              env=env, stderr=write, stdout=subprocess.DEVNULL)
             for name in ("alpha", "beta")]
    os.close(write)
    with os.fdopen(read, encoding="utf-8") as stream:
        lines = stream.read().splitlines()
    for p in procs:
        assert p.wait(timeout=60) == 0
    records = [json.loads(line) for line in lines]  # a joined line does not parse
    assert sorted(r["actor"] for r in records) == ["alpha"] * 400 + ["beta"] * 400
