"""``atomic-agent serve``: the root process.

Start-up: state dir → lock (one daemon per state dir) → config → logging → token →
LLM (the configured URL, or the embedded llama-server child) → the four actors
(memory first, it must outlive its writers) → websocket gateway → ``daemon.json``
→ one JSON ready line on stdout.

Shutdown (SIGTERM/SIGINT or a client's ``shutdown`` frame), in order: stop
accepting connections → agent, reflection, backfill stopped (running turns end with
reason ``shutdown``; in-flight LLM calls cancelled; nothing half written) → memory
checkpoints its WAL and closes → clients closed → llama-server stopped →
``daemon.json`` removed → exit 0. Too many actor restarts exit non-zero.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
import msgspec
import structlog
import trio
from trio_websocket import WebSocketServer

from actors import actor_names, actor_spec
from runtime.kernel import (ActorSpec, ForkedProcess, Supervisor, configure_logging,
                            fork_actors, open_supervisor, reap_unadopted)
from runtime.kernel.actor import leaf_exception
from runtime.kernel.errors import ActorCrashed, RestartIntensityExceeded, RuntimeFailure
from runtime.services.backends import api_key_for, primary_structured_mode
from runtime.services.llm import health_ok
from runtime.services.config import ActorBoot, Config, ConfigError, config_to_builtins, load_config
from runtime.services.llama import EmbeddedLLMError, run_llama_server
from runtime.services.models import ModelError, resolve_model

from .clients import ClientRegistry
from .gateway import Gateway
from .listen_guard import is_loopback, remote_bind_problem
from .state import (
    DaemonInfo,
    DaemonLock,
    StateError,
    ensure_state_dir,
    load_or_create_token,
    remove_daemon_info,
    write_daemon_info,
)
from .safe_text import print_error

log = structlog.get_logger()

BACKGROUND = ("reflection", "backfill")
"""Actors whose work no reply waits for; they run at :data:`BACKGROUND_NICE`."""
BACKGROUND_NICE = 10
"""Niceness added to background actors (``ActorSpec.nice``): under CPU contention the
kernel favours the root, agent and memory processes (bench.reflection measures it)."""

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


@dataclass
class ServeOptions:
    """``serve`` arguments that override the config file."""

    state_dir: Path
    host: str | None = None
    port: int | None = None
    llm_url: str | None = None
    log_level: str | None = None
    model: str | None = None
    http_port: int | None = None


def _fail(code: int, message: str) -> int:
    print_error(message)
    return code


def serve(opts: ServeOptions) -> int:
    """Run the daemon until shutdown; return the process exit code (never raises)."""
    os.umask(0o077)  # every file and folder the daemon and its actors create is private
    try:
        ensure_state_dir(opts.state_dir)
        lock = DaemonLock(opts.state_dir)
        lock.acquire()
    except StateError as exc:
        return _fail(EXIT_CONFIG if exc.code != "already_running" else EXIT_FAILED, exc.message)
    try:
        token = load_or_create_token(opts.state_dir)
    except StateError as exc:
        lock.release()
        return _fail(EXIT_CONFIG, exc.message)
    try:
        try:
            cfg = load_config(opts.state_dir)
        except ConfigError as exc:
            return _fail(EXIT_CONFIG, str(exc))
        if opts.host is not None:
            cfg.server.host = opts.host
        if opts.port is not None:
            cfg.server.port = opts.port
        if opts.http_port is not None:
            cfg.server.http_port = opts.http_port
        if opts.llm_url is not None:
            cfg.llm.url = opts.llm_url
        if opts.model is not None:
            cfg.llm.model = opts.model
        problem = remote_bind_problem(cfg.server.host, cfg.server.allow_remote)
        if problem is not None:
            return _fail(EXIT_CONFIG, problem)
        if not is_loopback(cfg.server.host):
            print_error(f"warning: listening on {cfg.server.host} "
                        "(server.allowRemote): anyone who can reach this address can try the "
                        "token, and it crosses the network in clear over plain HTTP; prefer "
                        "127.0.0.1 with an SSH tunnel or a TLS proxy")
        if not _port_free(cfg.server.host, cfg.server.port):
            return _fail(EXIT_FAILED, str(PortInUse(cfg.server.host, cfg.server.port)))
        if cfg.server.http_enabled and not _port_free(cfg.server.host,
                                                      cfg.server.resolved_http_port()):
            return _fail(EXIT_FAILED, str(PortInUse(cfg.server.host,
                                                    cfg.server.resolved_http_port(), http=True)))
        configure_logging("root", log_dir=opts.state_dir / "logs",
                       level=opts.log_level or cfg.logging.level)
        forked = _fork_actors(opts, cfg, lock)
        try:
            return trio.run(_serve, opts, cfg, forked, token)
        except KeyboardInterrupt:
            return EXIT_OK
        finally:
            reap_unadopted(forked)
    finally:
        remove_daemon_info(opts.state_dir)
        lock.release()


def _fork_actors(opts: ServeOptions, cfg: Config, lock: DaemonLock
                 ) -> dict[str, tuple[ForkedProcess, socket.socket]]:
    """Fork the four actors before ``trio.run`` (:func:`runtime.kernel.fork_actors`: they start with
    their modules already imported, for the ready ≤ 2 s target). Only when ``llm.url`` is
    set: with the embedded LLM the actors' boot waits for llama-server, longer than a
    child waits for its boot, so they are spawned after it as before. Also spawned
    when the environment sets ``ATOMIC_AGENT_FORK_START=0`` (a way back, and an A/B
    for the benchmarks). ``{}`` (spawn them all) when an actor module does not import;
    the spawn then reports it."""
    if not cfg.llm.url or os.environ.get("ATOMIC_AGENT_FORK_START", "1") == "0":
        return {}
    specs = _specs(opts, cfg, cfg.llm.url)
    try:
        return fork_actors(specs, log_dir=str(opts.state_dir / "logs"),
                           log_level=opts.log_level or cfg.logging.level,
                           keep_from_children=[fd for fd in (lock.fd,) if fd is not None])
    except Exception as exc:  # noqa: BLE001 - spawning reports the actor's own error
        log.warning("daemon.fork_start_failed", error_type=type(exc).__name__,
                    error=str(exc)[:200])
        return {}


def _specs(opts: ServeOptions, cfg: Config, llm_url: str) -> list[ActorSpec]:
    boot = msgspec.msgpack.encode(ActorBoot(state_dir=str(opts.state_dir), config=cfg,
                                            llm_url=llm_url))
    return [actor_spec(n, config=boot, nice=BACKGROUND_NICE if n in BACKGROUND else 0)
            for n in actor_names(cfg)]  # the store first: it is stopped last



def _embedder_desc(cfg: Config) -> str | None:
    """``"MODEL (PROVIDER)"`` of ``memory.embeddings``, or None when embeddings are off.
    The model loads ``backfillStartDelayMs`` after the ready line (start-up stays light);
    ``memory stats`` says when recall has turned hybrid."""
    emb = cfg.memory.embeddings
    return f"{emb.model} ({emb.provider})" if emb.enabled else None

async def _serve(opts: ServeOptions, cfg: Config,
                 forked: dict[str, tuple[ForkedProcess, socket.socket]], token: str) -> int:
    t0 = time.monotonic()
    shutdown = trio.Event()
    try:
        async with trio.open_nursery() as root:
            root.start_soon(_watch_signals, shutdown)
            llm_url, llm_desc = cfg.llm.url or "", "configured"
            if not cfg.llm.url:
                try:
                    model = resolve_model(cfg.llm.model or cfg.llm.model_path)
                    llm_url, server_desc = await root.start(partial_llama(cfg, opts, model.path))
                except (EmbeddedLLMError, ModelError) as exc:
                    root.cancel_scope.cancel()
                    return _fail(EXIT_FAILED, f"embedded LLM: {exc}")
                llm_desc = f"embedded {server_desc}, {model.title}"
            code = await _run_tree(opts, cfg, token, llm_url, llm_desc, shutdown, t0, forked)
            root.cancel_scope.cancel()
            return code
    except Exception as exc:  # noqa: BLE001 - the top of the process: map to one line
        return _fail(EXIT_FAILED, _describe_failure(exc))


def _port_free(host: str, port: int) -> bool:
    """False when ``host:port`` is already taken: checked before anything starts, so a
    taken port costs no model load (the listener's own bind still reports a race)."""
    if port == 0:
        return True
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return True  # an unresolvable host is reported by the listener itself
    for family, kind, proto, _name, addr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(addr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return False
    return True


class PortInUse(Exception):
    """The gateway's port (or, with ``http``, the HTTP API's) is taken by another program."""

    def __init__(self, host: str, port: int, http: bool = False) -> None:
        if http:
            super().__init__(f"port {port} on {host} (the OpenAI-compatible HTTP API) is "
                             f"already in use (another daemon or program?): choose another "
                             f"with --http-port N (0 = any free port), or turn the API off "
                             f"with server.httpEnabled false")
            return
        super().__init__(f"port {port} on {host} is already in use (another daemon or "
                         f"program?): choose another with --port N, or --port 0 for any "
                         f"free port")


def _describe_failure(exc: BaseException) -> str:
    """One clear line for a fatal start-up or supervision failure (never a traceback)."""
    leaf = leaf_exception(exc)
    if isinstance(leaf, PortInUse):
        return str(leaf)
    if isinstance(leaf, RestartIntensityExceeded):
        return f"{leaf}; shutting down"
    if isinstance(leaf, ActorCrashed):
        return f"actor {leaf.name!r} failed: {_crash_reason(leaf)}"
    if isinstance(leaf, EmbeddedLLMError):
        return f"embedded LLM: {leaf}"
    log.error("daemon.failed", error_type=type(leaf).__name__, error=str(leaf))
    return f"{type(leaf).__name__}: {leaf}"


def _crash_reason(exc: ActorCrashed) -> str:
    lines = [ln for ln in exc.remote_traceback.strip().splitlines() if ln.strip()]
    if not lines:
        return f"exit code {exc.exitcode}"
    return re.sub(r"^[\w.]+\.(\w+): ", r"\1: ", lines[-1])  # drop the module path


def partial_llama(cfg: Config, opts: ServeOptions, model: str
                  ) -> Callable[[trio.TaskStatus[tuple[str, str]]], Awaitable[None]]:
    """The embedded llama-server task for GGUF ``model``, bound to this config (for
    ``nursery.start``: it starts with ``(url, server description)``)."""

    async def task(
            task_status: trio.TaskStatus[tuple[str, str]] = trio.TASK_STATUS_IGNORED) -> None:
        await run_llama_server(model=model, parallel=cfg.llm.parallel,
                               ctx_size=cfg.llm.ctx_size,
                               log_path=opts.state_dir / "logs" / "llama-server.log",
                               startup_timeout_s=cfg.llm.startup_timeout_ms / 1000,
                               server=cfg.llm.server, server_args=cfg.llm.server_args,
                               slot_dir=opts.state_dir / "llm-cache",
                               task_status=task_status)
    return task


PROBE_TIMEOUT_S = 5.0


def _refused(exc: BaseException) -> bool:
    """True when a connection error comes from a refused connection (anywhere in its
    cause chain, or in an exception group of per-address attempts)."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError) or "refused" in str(e).lower():
            return True
        stack += [x for x in (e.__cause__, e.__context__) if x is not None]
        stack += list(getattr(e, "exceptions", ()))
    return False


class _ModelRow(msgspec.Struct):
    id: str
    owned_by: str = ""


class _ModelList(msgspec.Struct):
    data: list[_ModelRow]


def missing_model(model: str | None, body: bytes) -> str | None:
    """Why ``model`` will be refused, read from an OpenAI ``GET /v1/models`` answer
    (``{"data": [{"id": ...}]}``, https://platform.openai.com/docs/api-reference/models/list),
    or None: no model configured, a body of another shape, an empty list (some servers
    list nothing), ``model`` listed (Ollama's implicit ``:latest`` tag counts, and so does
    the file name of a listed path, with or without ``.gguf``), or llama.cpp's server with
    its one model (``owned_by: "llamacpp"``), which answers whatever model a request names
    (https://github.com/ggml-org/llama.cpp/tree/master/tools/server)."""
    if not model:
        return None
    try:
        rows = msgspec.json.decode(body, type=_ModelList).data
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    ids = [row.id for row in rows]
    if len(rows) == 1 and rows[0].owned_by == "llamacpp":
        return None
    names = {*ids, *(i.rsplit("/", 1)[-1] for i in ids)}
    names |= {n.removesuffix(".gguf") for n in names}
    if not ids or model in names or f"{model}:latest" in names or \
            model.removesuffix(":latest") in names:
        return None
    shown = ", ".join(ids[:8]) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")
    return f"has no model {model!r} (it serves {shown}); set llm.model to one of them"


async def probe_llm(cfg: Config) -> str:
    """One health probe of the primary LLM at start-up: ``"ok"`` or a short reason
    (``"connection refused"``, ``"HTTP 503"``, ``"no answer in 5 s"``, ``"has no
    model 'x' (it serves a, b); ..."``). llama-server is asked ``GET /health`` (200 once the
    model is loaded); an OpenAI API ``GET /v1/models`` (any answer below 500 means it is
    there; a list that names models but not ``llm.model`` is reported,
    :func:`missing_model`). Never raises."""
    url = (cfg.llm.url or "").rstrip("/")
    if not url:
        return "ok"  # the embedded server was just found healthy
    path = "/health" if cfg.llm.api == "llama-server" else "/v1/models"
    key = api_key_for(cfg.llm.api_key, cfg.llm.api_key_env, cfg.llm.api != "llama-server")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
            with trio.fail_after(PROBE_TIMEOUT_S + 1):
                response = await client.get(url + path, headers=headers)
    except trio.TooSlowError:
        return f"no answer in {PROBE_TIMEOUT_S:.0f} s"
    except httpx.ConnectError as exc:
        return "connection refused" if _refused(exc) else f"cannot connect: {exc}"[:120]
    except (httpx.HTTPError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"[:120]
    if cfg.llm.api != "llama-server":
        ok = response.status_code < 500
        missing = missing_model(cfg.llm.model, response.content) if ok else None
        if missing:
            return missing
    elif response.status_code == 200 and not health_ok(200, response.content):
        return f"{path} answered 200 but not as a llama-server (is another program on that port?)"
    else:
        ok = health_ok(response.status_code, response.content)
    return "ok" if ok else f"HTTP {response.status_code} from {path}"


async def _watch_signals(shutdown: trio.Event) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            log.info("daemon.signal")
            shutdown.set()


async def _run_tree(opts: ServeOptions, cfg: Config, token: str, llm_url: str, llm_desc: str,
                    shutdown: trio.Event, t0: float,
                    forked: dict[str, tuple[ForkedProcess, socket.socket]]) -> int:
    gateway: Gateway | None = None

    async def on_cast(src: str, body: msgspec.Raw) -> None:
        if gateway is not None:
            await gateway.on_cast(src, body)

    gateways: list[Gateway] = []  # (the gateway exists once the supervisor does)

    async def on_crash(crash: ActorCrashed) -> None:
        for gw in gateways:
            gw.actor_crashed(crash)

    async with open_supervisor(_specs(opts, cfg, llm_url), on_cast=on_cast,
                               on_crash=on_crash, log_dir=str(opts.state_dir / "logs"),
                               log_level=opts.log_level or cfg.logging.level,
                               prestarted=forked) as sup:
        registry = ClientRegistry(opts.state_dir, token)
        if registry.error is not None:  # one line at start; /health says it too
            print_error(f"warning: {registry.error}")
        gateway = Gateway(sup, token, cfg.server, shutdown.set, registry)
        gateways.append(gateway)
        async with trio.open_nursery() as conns:
            async with trio.open_nursery() as listen:
                listen.start_soon(gateway.watch_clients)
                try:
                    servers = await listen.start(partial_serve(gateway, conns))
                except OSError as exc:
                    if exc.errno == errno.EADDRINUSE:
                        raise PortInUse(cfg.server.host, cfg.server.port) from None
                    raise
                port = servers.port
                url = f"ws://{cfg.server.host}:{port}"
                openai_url = None
                if cfg.server.http_enabled:
                    openai_url = await _start_http_api(listen, gateway, sup, conns, token, cfg)
                # Probed once everything else is up: a start that fails says only why.
                llm_status = await probe_llm(cfg)
                if llm_status != "ok":
                    what = (llm_status if llm_status.startswith("has no model")
                            else f"did not answer ({llm_status})")
                    print_error(f"warning: the LLM at {llm_url} {what}; memory "
                                "works, turns fail until it does")
                structured = primary_structured_mode(cfg)
                info: DaemonInfo = {
                    "url": url, "pid": os.getpid(), "tokenFile": str(opts.state_dir / "token"),
                    "stateDir": str(opts.state_dir), "llm": llm_url, "llmKind": llm_desc,
                    "structuredOutput": structured,
                    "openaiUrl": openai_url,
                    # what this daemon runs with (file + defaults + serve's options),
                    # for `config show` while it runs; secrets masked
                    "config": config_to_builtins(cfg)}
                write_daemon_info(opts.state_dir, info)
                ready = {"event": "ready", "url": url, "openaiUrl": openai_url,
                         "tokenFile": info["tokenFile"],
                         "pid": os.getpid(), "llm": llm_url, "llmKind": llm_desc,
                         "llmHealthy": llm_status == "ok", "llmStatus": llm_status,
                         # how completions are constrained (GBNF, JSON schema or none)
                         "structuredOutput": structured,
                         # the embedded server's prompt cache is warmed after this line:
                         # the first turn says so while it lasts (a notice step)
                         "warmingUp": llm_url is not None and cfg.llm.url is None,
                         # the configured embedder; it attaches in the background after
                         # backfillStartDelayMs (`memory stats` says when it has)
                         "embedder": _embedder_desc(cfg),
                         "stateDir": str(opts.state_dir),
                         "startupMs": round((time.monotonic() - t0) * 1000)}
                print(json.dumps(ready), flush=True)
                log.info("daemon.ready", **{k: v for k, v in ready.items() if k != "event"})
                if "tools" in sup.names:
                    listen.start_soon(_report_tool_servers, sup)
                await shutdown.wait()
                t_stop = time.monotonic()
                gateway.accepting = False
                listen.cancel_scope.cancel()  # 1. stop accepting connections
            await sup.shutdown()  # 2-4. agent/reflection/backfill, then memory (started first)
            await gateway.close_all()
            conns.cancel_scope.cancel()
    log.info("daemon.stopped", shutdown_ms=round((time.monotonic() - t_stop) * 1000))
    return EXIT_OK


async def _report_tool_servers(sup: Supervisor) -> None:
    """Once each MCP server's first start is done (after the ready line: a slow server
    never holds the daemon back), one warning line per server that did not come up;
    ``/health`` and ``metrics`` keep saying it while it is down (docs/tools.md)."""
    from actors.tools.messages import ToolsStatus, ToolsStatusReply

    try:
        reply = await sup.request("tools", ToolsStatus(wait=True), ToolsStatusReply)
    except RuntimeFailure:
        return
    for server in reply.servers:
        if server.state == "down":
            print_error(f"warning: {server.error}; the agent goes on without its "
                        f"tools, and it is started again in the background")
        elif server.state == "up":
            log.info("daemon.tool_server_up", server=server.name, tools=len(server.tools))


async def _start_http_api(listen: trio.Nursery, gateway: Gateway, sup: Supervisor,
                          conns: trio.Nursery, token: str, cfg: Config) -> str:
    """Start the OpenAI-compatible HTTP API (``runtime.shell.openai_api``) in ``listen`` (it
    stops accepting with the gateway); its turns run in ``conns``, the daemon-lifetime
    nursery, like websocket turns. Returns its base URL (``http://host:port/v1``).
    PortInUse when its port is taken."""
    from .dashboard.app import DashboardApp
    from .dashboard.backend import Backend
    from .openai_api import OpenAIApi, PathRouter, serve_api

    assert gateway.registry.state_dir is not None  # (the daemon's registry reads one)
    store = cfg.memory.store
    dashboard = DashboardApp(Backend(sup.request, gateway.metrics, gateway.registry.state_dir),
                             gateway.registry, cfg.server,
                             team=store.team if store.engine == "postgres" else None)
    gateway.memory_listeners.append(dashboard.memory_changed)
    dashboard.clients_changed = gateway.apply_clients
    app = PathRouter(OpenAIApi(sup.request, conns.start_soon, gateway.turn_events,
                               gateway.registry, cfg.server, sup.cast),
                     {"/ui": dashboard, "/favicon.ico": dashboard})
    port = cfg.server.resolved_http_port()
    try:
        bound = await listen.start(partial(serve_api, app, cfg.server.host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(cfg.server.host, port, http=True) from None
        raise
    host = f"[{cfg.server.host}]" if ":" in cfg.server.host else cfg.server.host
    return f"http://{host}:{bound}/v1"


def partial_serve(gateway: Gateway, conns: trio.Nursery
                  ) -> Callable[[trio.TaskStatus[WebSocketServer]], Awaitable[None]]:
    """The gateway listener task (for ``nursery.start``: it starts with the listening
    server)."""

    async def task(
            task_status: trio.TaskStatus[WebSocketServer] = trio.TASK_STATUS_IGNORED) -> None:
        await gateway.serve(handler_nursery=conns, task_status=task_status)
    return task
