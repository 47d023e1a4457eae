"""Figures of how typed and how repetitive the package is, for the record of a refactor.

Prints, for ``actors/`` and ``runtime/``: memory-op names written as string literals
outside the op table (``actors/memory/ops.py``), ``Any`` in annotations (and in the shell),
``dict[str, Any]`` annotations, ``type: ignore`` comments, ``mypy --strict`` errors and the
largest functions (lines). Run from the repository root: ``python -m bench.code_health``.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOTS = ("actors", "runtime")


def _annotations(tree: ast.AST) -> list[ast.expr]:
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            out += [x.annotation for x in a.args + a.kwonlyargs + a.posonlyargs if x.annotation]
            out += [x.annotation for x in (a.vararg, a.kwarg) if x is not None and x.annotation]
            if node.returns is not None:
                out.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            out.append(node.annotation)
    return out


def measure(root: Path) -> dict[str, object]:
    """The figures of the module docstring for the tree at ``root``."""
    sys.path.insert(0, str(root))
    from actors.memory.ops import OPS

    table = root / "actors" / "memory" / "ops.py"
    literals = anys = shell_anys = dicts = ignores = 0
    literal_files: set[str] = set()
    funcs: list[tuple[int, str]] = []
    for base in ROOTS:
        for path in sorted((root / base).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text)
            ignores += len(re.findall(r"type:\s*ignore", text))
            if path != table:
                n = sum(1 for node in ast.walk(tree) if isinstance(node, ast.Constant)
                        and isinstance(node.value, str) and node.value in OPS)
                literals += n
                if n:
                    literal_files.add(str(path.relative_to(root)))
            for ann in _annotations(tree):
                spelled = ast.unparse(ann)
                k = len(re.findall(r"\bAny\b", spelled))
                anys += k
                shell_anys += k if "shell" in path.parts else 0
                dicts += spelled.count("dict[str, Any]")
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    size = (node.end_lineno or node.lineno) - node.lineno + 1
                    funcs.append((size, f"{path.relative_to(root)}:{node.lineno} {node.name}"))
    mypy = subprocess.run([sys.executable, "-m", "mypy", "--strict", *ROOTS], cwd=root,
                          capture_output=True, text=True)
    found = re.search(r"Found (\d+) errors?", mypy.stdout)
    funcs.sort(reverse=True)
    return {"op literals": f"{literals} in {len(literal_files)} files", "Any": anys,
            "Any (shell)": shell_anys, "dict[str, Any]": dicts, "type: ignore": ignores,
            "mypy --strict errors": int(found.group(1)) if found else 0,
            "largest functions": funcs[:5]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(),
                        help="the repository to measure (default: here)")
    args = parser.parse_args()
    for name, value in measure(args.root.resolve()).items():
        if isinstance(value, list):
            print(f"{name}:")
            for size, where in value:
                print(f"  {size:4d}  {where}")
        else:
            print(f"{name}: {value}")


if __name__ == "__main__":
    main()
