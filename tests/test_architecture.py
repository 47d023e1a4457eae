"""The house's floors (docs/architecture.md, "Floors") hold: the import-linter contracts in
``pyproject.toml`` are kept (shell > actors > services > kernel, the kernel a library
with no application dependencies whose ``_``-modules only it imports; inside the actors
floor the four actors over ``actors.store`` over ``actors.policy``, the actors' messages
modules leaves; no import circle among any package's siblings, ``bench`` included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "Contracts: 6 kept, 0 broken." in out.stdout, out.stdout[-2000:]


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
