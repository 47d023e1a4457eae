"""The portable embedded LLM server: llama.cpp's HTTP server from the ``xllamacpp`` wheel.

``python -m runtime.services.llama_portable -m MODEL.gguf --port N [llama-server flags…]``

``xllamacpp`` (MIT, a ``manylinux2014`` wheel) compiles llama.cpp's own C++ server into a
Python extension built for AVX2/FMA only, so it runs on any x86-64 CPU with AVX2 whatever
else the CPU advertises (no AVX-512, no AMX: unlike a build for this CPU, it cannot die
of SIGILL on a VM that advertises instructions it does not provide) and needs no
compiler. This module gives it the command line of a ``llama-server`` binary so
:mod:`runtime.services.llama` starts, watches and stops it like any other server child: it maps
the llama-server flags below onto ``xllamacpp.CommonParams``, starts the server (which
listens on its own threads), prints one line, and sleeps until SIGTERM/SIGINT.

Supported flags (llama-server spelling; the last one given wins): see :data:`FLAGS`.
An unsupported flag exits with status 2 and one line naming it and the supported ones,
so a bad ``llm.serverArgs`` entry is reported at start-up, not ignored.

Exit status: 0 on SIGTERM/SIGINT, 2 on a bad command line, 1 when the model cannot be
loaded or the port cannot be bound (xllamacpp's own log lines say why, on stderr).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["FLAGS", "build_params", "main", "parse_args"]


def _set(attr: str, conv: Callable[[str], Any] = str) -> Callable[[Any, str], None]:
    def apply(params: Any, value: str) -> None:
        setattr(params, attr, conv(value))
    return apply


def _threads(params: Any, value: str) -> None:
    params.cpuparams.n_threads = int(value)
    params.cpuparams_batch.n_threads = int(value)


def _threads_batch(params: Any, value: str) -> None:
    params.cpuparams_batch.n_threads = int(value)


def _model(params: Any, value: str) -> None:
    params.model.path = value


def _host(params: Any, value: str) -> None:
    params.hostnames = [value]


def _flag(attr: str, value: bool) -> Callable[[Any, None], None]:
    def apply(params: Any, _unused: None) -> None:
        setattr(params, attr, value)
    return apply


def _pooling(params: Any, value: str) -> None:
    import xllamacpp

    kinds = {"none": "LLAMA_POOLING_TYPE_NONE", "mean": "LLAMA_POOLING_TYPE_MEAN",
             "cls": "LLAMA_POOLING_TYPE_CLS", "last": "LLAMA_POOLING_TYPE_LAST",
             "rank": "LLAMA_POOLING_TYPE_RANK"}
    if value not in kinds:
        raise ValueError(f"--pooling takes one of {', '.join(kinds)}")
    params.pooling_type = getattr(xllamacpp.llama_pooling_type, kinds[value])


SPEC_TYPES = {"none": "COMMON_SPECULATIVE_TYPE_NONE", "draft": "COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE",
              "ngram-simple": "COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE",
              "ngram-map-k": "COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K",
              "ngram-map-k4v": "COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K4V",
              "ngram-mod": "COMMON_SPECULATIVE_TYPE_NGRAM_MOD",
              "ngram-cache": "COMMON_SPECULATIVE_TYPE_NGRAM_CACHE"}
"""``--spec-type`` names (llama-server's spelling) → ``xllamacpp.common_speculative_type``
members; see https://github.com/ggml-org/llama.cpp/blob/master/docs/speculative.md."""


def _spec_types(params: Any, value: str) -> None:
    import xllamacpp

    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in SPEC_TYPES]
    if unknown or not names:
        raise ValueError(f"takes a comma-separated list of {', '.join(SPEC_TYPES)}")
    params.speculative.types = [getattr(xllamacpp.common_speculative_type, SPEC_TYPES[n])
                                for n in names]


def _draft_model(params: Any, value: str) -> None:
    """``-md``: the draft model; adds the ``draft`` speculative type (as llama-server does)
    and gives the draft the main model's threads unless ``-td`` says otherwise."""
    import xllamacpp

    params.speculative.draft.mparams.path = value
    draft = xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE
    none = xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_NONE
    kinds = [t for t in params.speculative.types if t != none]
    if draft not in kinds:
        params.speculative.types = [*kinds, draft]
    for cpu in (params.speculative.draft.cpuparams, params.speculative.draft.cpuparams_batch):
        if cpu.n_threads <= 0:
            cpu.n_threads = params.cpuparams.n_threads


def _draft_threads(params: Any, value: str) -> None:
    params.speculative.draft.cpuparams.n_threads = int(value)
    params.speculative.draft.cpuparams_batch.n_threads = int(value)


def _draft_set(attr: str, conv: Callable[[str], Any]) -> Callable[[Any, str], None]:
    def apply(params: Any, value: str) -> None:
        setattr(params.speculative.draft, attr, conv(value))
    return apply


def _draft_max(params: Any, value: str) -> None:
    """``--draft-max``: the draft model's bound, and ``ngram-mod``'s (it reads its own)."""
    params.speculative.draft.n_max = params.speculative.ngram_mod.n_max = int(value)


def _verbosity(params: Any, value: str) -> None:
    params.verbosity = int(value)


def _timeouts(params: Any, value: str) -> None:
    params.timeout_read = params.timeout_write = int(value)


FLAGS: dict[tuple[str, ...], tuple[Callable[[Any, Any], None], bool]] = {
    ("-m", "--model"): (_model, True),
    ("--host",): (_host, True),
    ("--port",): (_set("port", int), True),
    ("-np", "--parallel"): (_set("n_parallel", int), True),
    ("-c", "--ctx-size"): (_set("n_ctx", int), True),
    ("-t", "--threads"): (_threads, True),
    ("-tb", "--threads-batch"): (_threads_batch, True),
    ("-b", "--batch-size"): (_set("n_batch", int), True),
    ("-ub", "--ubatch-size"): (_set("n_ubatch", int), True),
    ("-n", "--n-predict"): (_set("n_predict", int), True),
    ("--cache-reuse",): (_set("n_cache_reuse", int), True),
    ("--cache-ram", "-cram"): (_set("cache_ram_mib", int), True),
    ("--keep",): (_set("n_keep", int), True),
    ("--slot-save-path",): (_set("slot_save_path", lambda v: os.path.join(v, "")), True),
    ("--api-key",): (lambda p, v: setattr(p, "api_keys", [v]), True),
    ("--chat-template",): (_set("chat_template"), True),
    ("--pooling",): (_pooling, True),
    ("--spec-type",): (_spec_types, True),
    ("-md", "--model-draft"): (_draft_model, True),
    ("-td", "--threads-draft"): (_draft_threads, True),
    ("--draft-max", "--draft", "--draft-n"): (_draft_max, True),
    ("--draft-min", "--draft-n-min"): (_draft_set("n_min", int), True),
    ("--draft-p-min",): (_draft_set("p_min", float), True),
    ("-lv", "--verbosity", "--log-verbosity"): (_verbosity, True),
    ("--timeout", "-to"): (_timeouts, True),
    ("--no-repack", "-nr"): (_flag("no_extra_bufts", True), False),
    ("--repack",): (_flag("no_extra_bufts", False), False),
    ("--embedding", "--embeddings"): (_flag("embedding", True), False),
    ("--jinja",): (_flag("use_jinja", True), False),
    ("--no-jinja",): (_flag("use_jinja", False), False),
    ("--no-warmup",): (_flag("warmup", False), False),
    ("--kv-unified", "-kvu"): (_flag("kv_unified", True), False),
    ("--no-kv-unified",): (_flag("kv_unified", False), False),
    ("--cont-batching", "-cb"): (_flag("cont_batching", True), False),
    ("--no-cont-batching", "-nocb"): (_flag("cont_batching", False), False),
    ("--no-slots",): (_flag("endpoint_slots", False), False),
    ("--slots",): (_flag("endpoint_slots", True), False),
    ("--metrics",): (_flag("endpoint_metrics", True), False),
    ("--log-disable",): (lambda p, _v: setattr(p, "verbosity", -1), False),
}
"""llama-server flag spellings → (apply to ``CommonParams``, takes a value)."""


class UsageError(Exception):
    """The command line names a flag this server does not support, or a bad value."""


def parse_args(argv: list[str]) -> list[tuple[Callable[[Any, Any], None], Any, str]]:
    """Split ``argv`` into ``(apply, value, flag)`` steps, in order.

    Accepts ``--flag value`` and ``--flag=value``. Raises :class:`UsageError` on an
    unknown flag, a missing value, or a stray positional argument.
    """
    table = {name: spec for names, spec in FLAGS.items() for name in names}
    steps: list[tuple[Callable[[Any, Any], None], Any, str]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name not in table:
            raise UsageError(f"unsupported flag {arg!r} for the portable server (xllamacpp); "
                             f"python -m runtime.services.llama_portable --help lists the supported "
                             f'ones; use llm.server "native" or your own server (--llm-url) '
                             f"for others")
        apply, takes_value = table[name]
        if not takes_value:
            if eq:
                raise UsageError(f"{name} takes no value")
            steps.append((apply, None, name))
            i += 1
            continue
        if eq:
            value = inline
            i += 1
        elif i + 1 < len(argv):
            value = argv[i + 1]
            i += 2
        else:
            raise UsageError(f"{name} needs a value")
        steps.append((apply, value, name))
    return steps


def build_params(argv: list[str]) -> Any:
    """``xllamacpp.CommonParams`` for a llama-server command line (defaults: 2 threads,
    loopback). Raises :class:`UsageError` for a bad flag or value, or no ``-m``."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.hostnames = ["127.0.0.1"]
    params.cpuparams.n_threads = 2
    params.cpuparams_batch.n_threads = 2
    for apply, value, name in parse_args(argv):
        try:
            apply(params, value)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"{name} {value}: {exc}") from None
    if not params.model.path:
        raise UsageError("no model: pass -m MODEL.gguf")
    return params


def main(argv: list[str] | None = None) -> int:
    """Run the server until SIGTERM/SIGINT; return the exit status (see module doc)."""
    argv = sys.argv[1:] if argv is None else argv
    try:  # "atomic-agent: llama-server (portable) MODEL" in ps, not a python command line
        import setproctitle

        model = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
        setproctitle.setproctitle(f"atomic-agent: llama-server (portable) {model}".strip())
    except ImportError:
        pass
    if argv in (["-h"], ["--help"]):
        print(__doc__)
        print("Flags:", ", ".join(" / ".join(names) for names in FLAGS))
        return 0
    try:
        import xllamacpp
    except ImportError:
        print("llama_portable: xllamacpp is not installed (pip install "
              "'atomic-agent[embedded]')", file=sys.stderr)
        return 1
    try:
        params = build_params(argv)
    except UsageError as exc:
        print(f"llama_portable: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server = xllamacpp.Server(params)
    except Exception as exc:  # noqa: BLE001 - model load / bind failures: one line
        print(f"llama_portable: the server did not start: {exc}", file=sys.stderr)
        return 1
    print(f"llama_portable: xllamacpp {xllamacpp.__version__} listening on "
          f"{server.listening_address}", file=sys.stderr, flush=True)
    while not stop.wait(3600):
        pass
    return 0


if __name__ == "__main__":  # pragma: no cover - the child process entry point
    sys.exit(main())
