"""The type checker: mypy (``[tool.mypy]`` in ``pyproject.toml``) with ``strict = true``
on the whole package: the kernel, the services, the actors (the store library and the
policy included) and the shell (its TUI included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # mypy in a subprocess

REPO = Path(__file__).resolve().parents[1]


def _mypy(*packages: str) -> subprocess.CompletedProcess[str]:
    args = [arg for package in packages for arg in ("-p", package)]
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def test_kernel_and_services_type_check_strictly() -> None:
    done = _mypy("runtime.kernel", "runtime.services")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout


def test_actors_and_shell_type_check_strictly() -> None:
    done = _mypy("actors", "runtime.shell")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout
