"""Module and function size figures of the daemon's code (actors/ and runtime/).

Prints the largest modules and functions, how many functions reach 70 lines, and the
functions with 12 or more parameters. Run from the repository root:
``python ops/code_size.py [ROOT …]`` (default: actors runtime).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
            if a.args and a.args[0].arg in ("self", "cls"):
                params -= 1
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1, params


def main(roots: list[str]) -> None:
    mods, funcs = [], []
    for root in roots:
        for path in sorted(Path(root).rglob("*.py")):
            text = path.read_text()
            mods.append((len(text.splitlines()), str(path)))
            for name, line, length, params in functions(ast.parse(text)):
                funcs.append((length, params, f"{path}:{line} {name}"))
    mods.sort(reverse=True)
    funcs.sort(reverse=True)
    print(f"modules: {len(mods)}, lines: {sum(m[0] for m in mods)}; largest:")
    for n, p in mods[:5]:
        print(f"  {n:5d} {p}")
    print(f"functions: {len(funcs)}; largest:")
    for n, _, where in funcs[:5]:
        print(f"  {n:5d} {where}")
    print(f"functions >= 70 lines: {sum(1 for f in funcs if f[0] >= 70)}")
    many = sorted((f for f in funcs if f[1] >= 12), key=lambda f: -f[1])
    print(f"functions with >= 12 parameters: {len(many)}")
    for _, params, where in many:
        print(f"  {params:3d} {where}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["actors", "runtime"])
