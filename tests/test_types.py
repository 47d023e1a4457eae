"""The type checker: mypy, strict on the kernel and the services (``[tool.mypy]`` in
``pyproject.toml``). The actors and the shell are not checked yet (about 170 errors,
mostly ``dict`` shapes and ``Any`` at the message edges, to be typed as their tables are)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_kernel_and_services_type_check_strictly():
    done = subprocess.run([sys.executable, "-m", "mypy", "-p", "runtime.kernel", "-p",
                           "runtime.services"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout
