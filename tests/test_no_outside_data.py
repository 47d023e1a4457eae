"""A clone carries what its tests and benchmarks read: no tracked file refers
to a ``shared/`` folder beside the repository, and the evaluation data is in it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.daemon import REPO

# Spelled in pieces so that this file does not match itself. The four forms: a relative
# path up to the sibling folder, a parents[N] path joined with its name, its name joined
# with "data", and its sub-folders named in prose or code.
_OUTSIDE = re.compile("|".join([
    r"\.\./" + "shared",
    r"parents\[\d\]\s*/\s*[\"']" + "shared",
    r"[\"']" + "shared" + r"[\"']\s*/\s*[\"']data",
    r"\b" + "shared" + r"/(data|cases|reference|seeds)\b",
]))


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def test_no_tracked_file_reads_outside_the_repository():
    offenders = []
    for rel in _tracked():
        path = REPO / rel
        if path.suffix in {".svg", ".png", ".json"} or not path.is_file() or path == Path(__file__):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if _OUTSIDE.search(line):
                offenders.append(f"{rel}:{n}: {line.strip()[:100]}")
    assert offenders == []


def test_the_evaluation_data_is_in_the_repository_with_its_licence():
    data = REPO / "bench" / "data"
    tracked = set(_tracked())
    for name in ("locomo-dev.json", "locomo10.NOTICE.md", "formation-dev.json", "README.md"):
        assert f"bench/data/{name}" in tracked, name
    assert "CC BY-NC 4.0" in (data / "locomo10.NOTICE.md").read_text()
    formation = json.loads((data / "formation-dev.json").read_text())
    assert formation["about"] and len(formation["cases"]) >= 20
    assert len(json.loads((data / "locomo-dev.json").read_text())) == 6
