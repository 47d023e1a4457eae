"""``docs/RELIABILITY.md`` stays true: every test its table names exists, and every
count it states equals the constant it says it comes from."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "RELIABILITY.md"
ROW = re.compile(r"^\|(?P<cells>.+)\|\s*$")


def rows() -> list[list[str]]:
    """The data rows of the "Tried and survived" table, as cell lists."""
    text = DOC.read_text(encoding="utf-8")
    table = text.split("## Tried and survived", 1)[1].split("\n## ", 1)[0]
    out = []
    for line in table.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", m.group("cells"))]
        if cells[0] in ("Area", "---") or set(cells[0]) <= {"-"}:
            continue
        out.append(cells)
    return out


def _value(source: str) -> int:
    """Evaluate ``pkg.mod.NAME`` or ``len(pkg.mod.NAME)``."""
    wrapped = re.fullmatch(r"len\((.+)\)", source)
    dotted = wrapped.group(1) if wrapped else source
    module, _, name = dotted.rpartition(".")
    value = getattr(importlib.import_module(module), name)
    return len(value) if wrapped else int(value)


def test_every_row_names_an_existing_test_and_its_count_is_the_tests_own():
    table = rows()
    assert len(table) >= 8
    for area, tried, count, source, survived, test in table:
        ref = test.strip("`")
        path, _, func = ref.partition("::")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        if func:
            assert callable(getattr(module, func, None)), f"{ref} does not exist"
        source = source.strip("`")
        if source != "—":
            assert int(count) == _value(source), f"{area}: {tried[:40]}… says {count}"
