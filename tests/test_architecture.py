"""The house's floors (docs/architecture.md, "Floors") hold: the import-linter contracts in
``pyproject.toml`` are kept (shell > actors > services > kernel, the kernel a library
with no application dependencies whose ``_``-modules only it imports; inside the actors
floor four independent actors over the memory store library over the memory policy;
the actors' wire contracts leaves; no import circle among any package's siblings,
``bench`` included)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"]
    assert len(contracts) >= 6
    assert f"Contracts: {len(contracts)} kept, 0 broken." in out.stdout, out.stdout[-2000:]


def test_the_kernel_names_no_actor_and_no_application_module():
    """Also what an import graph cannot see: module names in strings (the kernel imports
    the module an ``ActorSpec`` names; it has no default of its own)."""
    for path in (REPO / "runtime" / "kernel").glob("*.py"):
        code = path.read_text()
        for needle in ('"actors.', "'actors.", 'f"actors', '"memory"', '"agent"', '"reflection"',
                       '"backfill"'):
            assert needle not in code, f"{path.name} mentions {needle}"


def test_runtime_init_only_imports_the_kernel():
    """``import runtime`` re-exports the kernel's surface and does nothing else: no
    library imported behind import-linter's back (``importlib``), no module hidden."""
    code = (REPO / "runtime" / "__init__.py").read_text()
    assert "importlib" not in code and "sys.modules" not in code
    statements = [line for line in code.splitlines() if line.startswith(("import ", "from "))]
    assert statements and all(line.startswith("from .kernel import ") for line in statements)


def test_talking_to_an_actor_loads_no_sqlite_numpy_or_http_client() -> None:
    """The actors package, every actor's messages, memory's op table and its typed client
    load no apsw, numpy or httpx (the import-linter contract checks the imports it can
    see; this checks what a fresh process really loads, ``importlib`` included)."""
    code = ("import sys, actors, actors.memory.client, actors.memory.ops, "
            "actors.memory.messages, actors.agent.messages, actors.reflection.messages, "
            "actors.backfill.messages; "
            "print(sorted(m for m in ('apsw', 'numpy', 'httpx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parent.parent)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_agent_reflection_and_backfill_load_no_module_of_the_sqlite_engine() -> None:
    """What a fresh process of each of those actors loads of the memory store: its pure
    core only (records, rendering, ranking arithmetic, text rules); the SQLite engine
    is the memory actor's alone."""
    pure = {"actors.store", "actors.store.clock", "actors.store.columns", "actors.store.dates",
            "actors.store.errors", "actors.store.files", "actors.store.focus",
            "actors.store.fts", "actors.store.old_values", "actors.store.person",
            "actors.store.plans", "actors.store.records", "actors.store.render",
            "actors.store.tail"}
    for actor in ("agent", "reflection", "backfill"):
        code = (f"import sys, actors.{actor}.actor; print(sorted(m for m in sys.modules "
                "if m.startswith('actors.store')))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, cwd=Path(__file__).resolve().parent.parent)
        loaded = set(eval(out.stdout))  # noqa: S307 - a list of module names we printed
        assert loaded <= pure, (actor, sorted(loaded - pure))


def test_the_module_counts_the_architecture_doc_gives_are_true() -> None:
    """docs/architecture.md counts each floor's modules ("kernel 13, services 14, …"):
    the counts it gives are the tree's."""
    root = Path(__file__).resolve().parent.parent
    text = (root / "docs" / "architecture.md").read_text(encoding="utf-8")
    found = re.search(r"kernel (\d+), services (\d+), actors (\d+) \((\d+) of them the store, "
                      r"(\d+) the policy\), shell (\d+)", " ".join(text.split()))
    assert found, "the module counts are no longer in docs/architecture.md"

    def modules(folder: str) -> int:
        return sum(1 for p in (root / folder).rglob("*.py") if p.name != "__init__.py")

    assert [int(g) for g in found.groups()] == [
        modules("runtime/kernel"), modules("runtime/services"), modules("actors"),
        modules("actors/store"), modules("actors/policy"), modules("runtime/shell")]
