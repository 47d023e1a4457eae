"""Typed configuration: ``<state>/config.json`` decoded into Structs.

Every ``memory.*`` key with its default (the list: docs/architecture.md §6), the later
channels among them (embeddings, rewriter, lessons, procedures, links, voting), and ``llm``,
``server``, ``agent``, ``logging``. JSON keys are camelCase (``memory.reflection.timeoutMs``).
An unknown key, a wrong type or an out-of-range value raises :class:`ConfigError`
whose message names the key path, e.g.
``config.json: memory.reflection.timeoutMs: Expected int >= 100, got -1``.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from runtime.kernel.unicode import has_lone_surrogates, repair

from .structured import Mode as StructuredMode


class ConfigError(Exception):
    """The configuration file is unreadable or invalid; ``code`` = "config_invalid"."""

    code = "config_invalid"


Pos = Annotated[int, Meta(ge=1)]
NonNeg = Annotated[int, Meta(ge=0)]
Ms = Annotated[int, Meta(ge=100, le=3_600_000)]
Fraction = Annotated[float, Meta(ge=0.0, le=1.0)]
LongMs = Annotated[int, Meta(ge=0, le=365 * 86_400_000)]
"""A duration in ms up to a year (the cold path's intervals, cool-downs and ages)."""
DAY_MS = 86_400_000


class _C(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """Base: camelCase keys, unknown keys rejected."""


class ProfileConfig(_C):
    """memory.profile.*."""

    enabled: bool = True
    max_tokens: Pos = 512
    contextual_keyword_gate: bool = True
    max_entries: Pos = 500
    pinned_budget_chars: Annotated[int, Meta(ge=100, le=100_000)] = 1500
    show_dates: bool = True
    """A fact that replaced an earlier value shows it and since when: ``- home_city:
    Berlin (since 3 Nov 2026; before: Lyon)`` ("where did I live before?"); one whose
    value is relative to the day it was said shows that day: ``- dentist: next Friday
    (said 2 Dec 2026)``."""


class SessionFactsConfig(_C):
    """memory.sessionFacts.* (``### session-facts``, the session's known facts, last 8;
    docs/architecture.md §5): the profile facts written in this session, newest ``limit``."""

    enabled: bool = True
    limit: Annotated[int, Meta(ge=1, le=50)] = 8
    max_tokens: Pos = 200


class ReflectionConfig(_C):
    """memory.reflection.*. timeoutMs in milliseconds.

    ``timeoutMs`` 60 000 (10 000 would suit only a fast server): measured with
    the default Qwen2.5-Coder-1.5B on the portable server, 2 cores, a reflection lands
    in 1–6 s once its prompt prefix is cached (bench.formation: p95 5.7 s), and the
    uncached first call evaluates ~700 prompt tokens at 90 tokens/s idle and ~30 under
    load (bench.llm_server) — about 25 s; twice that leaves room for a busy machine."""

    enabled: bool = True
    timeout_ms: Ms = 60_000
    max_facts_per_call: Annotated[int, Meta(ge=0, le=6)] = 3
    auto_store_notes: bool = True
    max_notes_per_call: Annotated[int, Meta(ge=0, le=6)] = 2


class NotesConfig(_C):
    """memory.notes.*."""

    enabled: bool = True
    max_entries: Pos = 1000
    max_content_chars: Annotated[int, Meta(ge=1, le=100_000)] = 4000
    recall_default_k: Annotated[int, Meta(ge=1, le=50)] = 5
    eviction: Literal["utility", "fifo"] = "utility"
    """Overflow eviction order: ``utility`` (least recalled, least recently recalled,
    oldest first: a note recalled often outlives notes nobody recalled) or ``fifo`` (oldest
    ``updated_at``)."""
    dedup_threshold: Fraction = 0.85
    """Token-Jaccard at or above which a new note merges into an existing one, so a
    near-identical note is not stored twice; 1.0 merges only normalised-identical text."""


class RecallInjectionConfig(_C):
    """memory.recallInjection.*."""

    enabled: bool = True
    k: Annotated[int, Meta(ge=1, le=50)] = 3
    preview_chars: Annotated[int, Meta(ge=1, le=400)] = 160
    max_tokens: Pos = 400
    show_dates: bool = True
    """Each line carries the day its note was written (``- #12 8 May 2023: …``)."""
    time_windows: bool = True
    """A message that names a time ("last week", "on 24 October 2023") recalls the notes
    written then first (``actors.store.context.timed_recall``)."""
    focus_items: Annotated[int, Meta(ge=0, le=12)] = 5
    """How many of the items most likely to change the answer (health and diet first,
    then the best recalled notes, then the shown profile) ``### respond`` repeats next to
    the question (``actors.store.focus``); 0 turns the line off."""


class IndexConfig(_C):
    """memory.index.*."""

    enabled: bool = True
    limit: Annotated[int, Meta(ge=1, le=200)] = 20
    preview_chars: Annotated[int, Meta(ge=1, le=400)] = 60
    max_tokens: Pos = 300
    show_dates: bool = True
    """Each row carries the day its note was written, as in ``### recalled``."""


LOCAL_EMBEDDING_MODELS: tuple[str, ...] = ("wordllama-l2-supercat-256", "all-minilm-l6-v2-int8")
"""The models the ``local`` provider runs in-process (``runtime.services.embeddings.providers.load_local``)."""


class EmbeddingsConfig(_C):
    """memory.embeddings.*. Delays and timeouts in ms.

    ``provider``: ``local`` (in-process: ``model`` ``all-minilm-l6-v2-int8``, the default
    -- a sentence model: LoCoMo dev hybrid recall@10 73.8 % against
    wordllama's 72.3 %, about 200 notes/s backfill, 3-4 ms per query embedding -- or the
    faster, weaker ``wordllama-l2-supercat-256``; ``python -m bench.embedders``),
    ``llama-server`` (``POST
    <url>/embedding``) or ``openai`` (``POST <url>/v1/embeddings``, ``url`` defaults to
    ``https://api.openai.com``). A server model is attached only when a probe embed comes
    back with the model's dimension: the catalog's (``runtime.services.embeddings.embedder.CATALOG``)
    or, for a model the catalog does not know, ``dim``. ``apiKey`` / ``apiKeyEnv``
    (default ``OPENAI_API_KEY`` for ``openai``) give a bearer token; ``timeoutMs`` bounds
    one embedding request (10 s); a recall waits at most 2 s of it.
    """

    enabled: bool = True
    provider: Literal["local", "llama-server", "openai"] = "local"
    model: str = "all-minilm-l6-v2-int8"
    url: str | None = None
    dim: Annotated[int, Meta(ge=1, le=65_536)] | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    timeout_ms: Ms = 10_000
    vector_weight: Fraction = 0.5
    brute_force_ceiling: Pos = 2000
    backfill: bool = True
    backfill_start_delay_ms: Annotated[int, Meta(ge=0, le=600_000)] = 2000
    backfill_batch_size: Annotated[int, Meta(ge=1, le=1024)] = 32

    def __post_init__(self) -> None:
        # A typo here would leave recall keyword-only with a reason only `memory stats`
        # shows; refuse it where the config is read or set instead.
        if self.provider == "local" and self.model not in LOCAL_EMBEDDING_MODELS:
            raise ValueError(f"model {self.model!r} is not a local model: the local provider "
                             f"runs {' or '.join(LOCAL_EMBEDDING_MODELS)} (or set provider "
                             "to llama-server or openai)")


class RewriterConfig(_C):
    """memory.rewriter.*."""

    enabled: bool = True
    timeout_ms: Ms = 10_000
    history_turns: Annotated[int, Meta(ge=0, le=20)] = 3


class LessonsConfig(_C):
    """memory.lessons.*. ``maxEntries`` active lessons at most (the
    consolidator's overflow sweep deprecates the oldest); ``deprecationAgeMs``: an active
    lesson that never helped (success 0) is deprecated at this age."""

    enabled: bool = True
    recall_k: Annotated[int, Meta(ge=1, le=10)] = 2
    max_tokens: Pos = 300
    max_entries: Annotated[int, Meta(ge=1, le=100_000)] = 500
    deprecation_age_ms: LongMs = 30 * DAY_MS


class ProceduresConfig(_C):
    """memory.procedures.*; the caps as for lessons (age: success
    and use both 0)."""

    enabled: bool = True
    recall_k: Annotated[int, Meta(ge=1, le=10)] = 2
    max_tokens: Pos = 400
    max_entries: Annotated[int, Meta(ge=1, le=100_000)] = 500
    deprecation_age_ms: LongMs = 30 * DAY_MS


class LinksConfig(_C):
    """memory.links.*. ``autoGenerate``: after reflection the
    link generator asks the model for links between the notes the turn surfaced (at
    least ``minCandidates``), at most ``maxLinksPerCall`` accepted, within
    ``generatorTimeoutMs``; off by default: the default 1.5B model answered NONE for 3 of
    3 related note sets and linked unrelated ones as CONTRADICTS (bench/RESULTS.md,
    "Cold path"). ``similarityFloor``: a new note, once embedded, is linked
    (RELATES_TO, weight = cosine) to its ``similarityLinks`` nearest notes at or above
    this cosine (0.45 measured for the default MiniLM embedder; 0 turns it off).
    ``expandByMeaning``: whether the prompt's link expansion (``maxExpanded``
    neighbours of the recalled notes, ``expansionDepth`` hops) also follows those links
    by meaning; off by default, so it follows only links written by ``memory.links.add``
    and the link generator: neighbours by meaning did not lift LoCoMo recall at equal
    slots, and with them the default model's first reply token came about 2.5 s later
    on 2 cores (every added tail token is prefilled before it; bench/RESULTS.md "Cold
    path"). Links by meaning still feed the consolidator's clusters."""

    enabled: bool = True
    expansion_depth: Annotated[int, Meta(ge=1, le=3)] = 1
    max_expanded: Annotated[int, Meta(ge=1, le=100)] = 12
    expand_by_meaning: bool = False
    auto_generate: bool = False
    similarity_floor: Fraction = 0.45
    similarity_links: Annotated[int, Meta(ge=1, le=10)] = 3
    max_links_per_call: Annotated[int, Meta(ge=1, le=16)] = 4
    min_candidates: Annotated[int, Meta(ge=2, le=50)] = 2
    generator_timeout_ms: Ms = 60_000


class VotingConfig(_C):
    """memory.voting.*. When enabled the vote runner asks the
    model, after each turn, which rendered items helped (``UPVOTE``) or misled
    (``DOWNVOTE``); a vote moves the item's ``vote_score`` by one, clamped to
    ±``maxVotePerItem``; every consolidator tick multiplies scores by ``signalDecay``.
    Effects: note eviction order, lesson and procedure rerank (``scoreBlend``) and
    vote deprecation, profile facts hidden from the prompt at ``vote_score ≤
    -profileFilterThreshold``. ``eventLogMaxRows`` caps the audit table. Off by
    default: with the default 1.5B model on 2 cores the extra call
    per turn made replies 1.6× slower (median) and upvoted 150 of 170 items it was shown
    (bench/RESULTS.md, "Cold path"); turn it on with a faster server."""

    enabled: bool = False
    event_log_max_rows: Annotated[int, Meta(ge=1, le=10_000_000)] = 50_000
    max_vote_per_item: Annotated[int, Meta(ge=1, le=1000)] = 50
    signal_decay: Annotated[float, Meta(gt=0.0, le=1.0)] = 0.95
    score_blend: Fraction = 0.6
    profile_filter_threshold: Annotated[int, Meta(ge=1, le=1000)] = 3
    timeout_ms: Ms = 60_000


class ConsolidationConfig(_C):
    """memory.consolidation.*: the cold path's consolidator. Every
    ``intervalMs`` (and on ``atomic-agent memory consolidate``) it distils clusters of
    linked notes older than ``cooldownMs`` (at least ``minClusterSize`` members, at most
    ``maxClustersPerTick`` clusters, one LLM call each within ``distillTimeoutMs``) into
    a lesson (and a procedure), archiving the parents; ``requireSharedTag`` trims each
    cluster to the notes sharing its most common tag (off by default: reflection writes
    untagged notes). ``leaseMs``: how long a claimed note stays claimed."""

    enabled: bool = True
    interval_ms: Annotated[int, Meta(ge=1000, le=365 * DAY_MS)] = 6 * 3_600_000
    cooldown_ms: LongMs = DAY_MS
    min_cluster_size: Annotated[int, Meta(ge=2, le=50)] = 3
    max_clusters_per_tick: Annotated[int, Meta(ge=1, le=100)] = 5
    require_shared_tag: bool = False
    distill_timeout_ms: Ms = 120_000
    lease_ms: Annotated[int, Meta(ge=1000, le=DAY_MS)] = 600_000


TENANT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
"""A tenant id: lower-case letters, digits, ``_`` and ``-``, at most 63 characters."""


class StoreConfig(_C):
    """memory.store.*: where memory lives (docs/teams.md).

    ``engine``: ``sqlite`` (the default: ``<state>/memory.sqlite``, one person, one
    machine) or ``postgres`` (a PostgreSQL server with pgvector, shared by several
    daemons). ``url`` (``postgresql://user:password@host/db``) or ``urlFile`` (a file
    holding it, so the password stays out of ``config.json``; relative to the state
    directory) says which server; neither is ever logged or shown. ``tenant``: whose
    memory this daemon keeps (default: an id made once and kept in
    ``<state>/tenant``, so two state directories on one server are two people).
    ``team``: the team whose shared space this daemon reads (its notes recalled beside
    the person's own, at most ``teamRecallK`` a turn, each marked) and, for clients
    with the ``team:write`` scope, shares into (``memory.share``). ``poolSize``:
    connections the daemon keeps open to the server.
    """

    engine: Literal["sqlite", "postgres"] = "sqlite"
    url: str | None = None
    url_file: str | None = None
    tenant: Annotated[str, Meta(pattern=TENANT_PATTERN)] | None = None
    team: Annotated[str, Meta(pattern=TENANT_PATTERN)] | None = None
    team_recall_k: Annotated[int, Meta(ge=0, le=10)] = 2
    pool_size: Annotated[int, Meta(ge=1, le=64)] = 4

    def __post_init__(self) -> None:
        if self.url is not None and self.url_file is not None:
            raise ValueError("set url or urlFile, not both")
        if self.engine == "postgres" and self.url is None and self.url_file is None:
            raise ValueError("engine postgres needs url (postgresql://…) or urlFile")
        if self.team is not None and self.engine != "postgres":
            raise ValueError("team needs engine postgres (a team shares one server)")
        if self.url is not None and not self.url.startswith(("postgresql://", "postgres://")):
            raise ValueError("url must start with postgresql:// (or postgres://)")


class MemoryConfig(_C):
    """The ``memory`` block."""

    store: StoreConfig = msgspec.field(default_factory=StoreConfig)

    profile: ProfileConfig = msgspec.field(default_factory=ProfileConfig)
    reflection: ReflectionConfig = msgspec.field(default_factory=ReflectionConfig)
    notes: NotesConfig = msgspec.field(default_factory=NotesConfig)
    recall_injection: RecallInjectionConfig = msgspec.field(default_factory=RecallInjectionConfig)
    index: IndexConfig = msgspec.field(default_factory=IndexConfig)
    session_facts: SessionFactsConfig = msgspec.field(default_factory=SessionFactsConfig)
    embeddings: EmbeddingsConfig = msgspec.field(default_factory=EmbeddingsConfig)
    rewriter: RewriterConfig = msgspec.field(default_factory=RewriterConfig)
    lessons: LessonsConfig = msgspec.field(default_factory=LessonsConfig)
    procedures: ProceduresConfig = msgspec.field(default_factory=ProceduresConfig)
    links: LinksConfig = msgspec.field(default_factory=LinksConfig)
    voting: VotingConfig = msgspec.field(default_factory=VotingConfig)
    consolidation: ConsolidationConfig = msgspec.field(default_factory=ConsolidationConfig)

    def after_turn_calls(self) -> bool:
        """Whether anything runs on the reflection slot after a turn: reflection, the
        vote runner or the LLM link generator (the agent casts ``Reflect`` only then)."""
        return (self.reflection.enabled or self.voting.enabled
                or (self.links.enabled and self.links.auto_generate))


Api = Literal["llama-server", "openai-chat", "openai-completions"]


class BackendConfig(_C):
    """One LLM backend (an ``llm.fallbacks`` entry; ``llm`` itself is the primary).

    ``api``: ``llama-server`` (native ``/completion``, slots, GBNF), ``openai-chat``
    (``/v1/chat/completions``) or ``openai-completions`` (``/v1/completions``).
    ``apiKey`` or the environment variable named by ``apiKeyEnv`` (default
    ``OPENAI_API_KEY`` for the OpenAI APIs) is sent as a bearer token. ``model`` is sent
    to OpenAI APIs. ``structuredOutput`` (``auto`` | ``gbnf`` | ``json_schema`` |
    ``none``): how completions are constrained to the shape the caller parses -- GBNF on
    the native API, a JSON schema (``response_format``) on an OpenAI API, or nothing
    (:mod:`runtime.services.structured`). ``grammar``: the older switch to send GBNF to
    an OpenAI API (llama.cpp's extension); with ``structuredOutput: auto`` it means
    ``gbnf``.
    """

    url: str
    api: Api = "llama-server"
    api_key: str | None = None
    api_key_env: str | None = None
    model: str | None = None
    grammar: bool = False
    structured_output: StructuredMode = "auto"


class LLMConfig(_C):
    """``llm``: where completions come from.

    ``url`` None means the embedded default: a managed llama.cpp server child
    (:mod:`runtime.services.llama`) loading ``model`` — a name from :data:`runtime.services.models.MODELS`
    or a path to a ``.gguf`` file (``modelPath`` is the older spelling of a path). With
    a ``url``, ``model`` is the model name sent to OpenAI APIs. ``server`` picks the
    embedded server (``auto``, ``portable``, ``native``, ``prebuilt`` or a path to a
    llama-server binary; :mod:`runtime.services.llama`) and ``serverArgs`` are appended
    to its command line (e.g. ``["--no-repack"]``).
    ``api`` selects the wire protocol (see :class:`BackendConfig` for it and ``apiKey``,
    ``apiKeyEnv``, ``grammar``, ``structuredOutput``); ``fallbacks`` are tried in order when it fails, and a
    session sticks to the backend that last served it (``runtime.services.backends``). Timeouts
    in ms.
    """

    url: str | None = None
    api: Api = "llama-server"
    api_key: str | None = None
    api_key_env: str | None = None
    model: str | None = None
    grammar: bool = False
    structured_output: StructuredMode = "auto"
    fallbacks: list[BackendConfig] = msgspec.field(default_factory=list)
    model_path: str | None = None
    server: str = "auto"
    server_args: list[Annotated[str, Meta(max_length=4096)]] = msgspec.field(default_factory=list)
    parallel: Annotated[int, Meta(ge=1, le=16)] = 2
    ctx_size: Annotated[int, Meta(ge=512, le=262_144)] = 4096
    request_timeout_ms: Ms = 120_000
    n_predict: Annotated[int, Meta(ge=16, le=8192)] = 256
    temperature: Annotated[float, Meta(ge=0.0, le=2.0)] = 0.2
    prompt_template: Literal["chatml", "plain"] = "chatml"
    startup_timeout_ms: Ms = 120_000


class ServerConfig(_C):
    """``server``: the websocket gateway (docs/protocol.md). maxFrameBytes in bytes;
    clientQueue: outbound frames buffered per client before it is dropped as too slow;
    clientInflight: requests one client may have running at once; past that each
    request is answered ``busy`` (a flooding client waits on itself).
    httpEnabled / httpPort: the OpenAI-compatible HTTP API (``runtime.shell.openai_api``) on
    the same host; httpPort null = port + 1. pingIntervalMs / pingTimeoutMs: every
    connection is pinged at this interval and closed when no pong comes within the
    timeout (a half-open peer); pingIntervalMs 0 turns pings off.
    allowRemote: a host that is not a loopback address is refused without it (the token
    would cross the network in clear). handshakeTimeoutMs: a connection that has not
    finished its websocket upgrade and ``hello`` (or an HTTP request that has not sent its
    headers and body) within this is closed. maxPendingPerPeer: connections one address
    may have open before their ``hello`` at once; more are refused (HTTP 429)."""

    host: str = "127.0.0.1"
    allow_remote: bool = False
    handshake_timeout_ms: Annotated[int, Meta(ge=100, le=600_000)] = 10_000
    max_pending_per_peer: Annotated[int, Meta(ge=1, le=100_000)] = 16
    port: Annotated[int, Meta(ge=0, le=65535)] = 8765
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    max_frame_bytes: Annotated[int, Meta(ge=1024, le=64 * 1024 * 1024)] = 1024 * 1024
    client_queue: Annotated[int, Meta(ge=8, le=100_000)] = 256
    client_inflight: Annotated[int, Meta(ge=1, le=10_000)] = 16
    http_enabled: bool = True
    http_port: Annotated[int, Meta(ge=0, le=65535)] | None = None
    ping_interval_ms: Annotated[int, Meta(ge=0, le=3_600_000)] = 20_000
    ping_timeout_ms: Annotated[int, Meta(ge=100, le=3_600_000)] = 20_000

    def resolved_http_port(self) -> int:
        """``server.httpPort``, the OpenAI-compatible HTTP API's port: as configured,
        else the websocket port + 1 (8766 by default), or 0 (any free port) when the
        websocket port is 0."""
        if self.http_port is not None:
            return self.http_port
        return 0 if self.port in (0, 65535) else self.port + 1


class AgentConfig(_C):
    """``agent``: the turn loop."""

    max_steps: Annotated[int, Meta(ge=1, le=64)] = 4
    conversation_max_tokens: NonNeg = 0
    history_messages: Annotated[int, Meta(ge=0, le=1000)] = 40


TOOL_SERVER_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
"""An MCP server's name in ``tools.mcpServers``: it prefixes its tools' names
(``git.git_status``), so it is short, lower case and has no dot."""


class McpServerConfig(_C):
    """``tools.mcpServers.<name>``: one MCP server whose tools the agent may use
    (docs/tools.md). Either a local program spoken to over stdio — ``command`` and its
    ``args``, with ``env`` added to a minimal environment and ``cwd`` as its working
    directory — or a streamable HTTP server at ``url``, with ``headers`` sent on each
    request and ``tokenFile`` (relative to the state directory) holding a bearer token,
    so the token stays out of ``config.json``. ``enabled``: false keeps the entry and
    starts nothing. ``timeoutMs``: the most a start, a tool listing or one call may
    take."""

    command: str | None = None
    args: list[str] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    token_file: str | None = None
    enabled: bool = True
    timeout_ms: Annotated[int, Meta(ge=100, le=600_000)] = 30_000

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError("set command (a program spoken to over stdio) or url (a "
                             "streamable HTTP server), one of them")
        if self.command is not None and not self.command.strip():
            raise ValueError("command is empty")
        if self.url is not None:
            if not self.url.startswith(("http://", "https://")):
                raise ValueError("url must start with http:// or https://")
            if self.env or self.args or self.cwd:
                raise ValueError("args, env and cwd are for a command, not a url")
        elif self.headers or self.token_file:
            raise ValueError("headers and tokenFile are for a url, not a command")


class ToolsConfig(_C):
    """``tools``: the MCP servers whose tools the agent may use (docs/tools.md).
    ``offerMax``: at most this many of their tools are offered to the model in one step
    (those that fit the message best; a 1.5B model does not choose well among many,
    ``bench/tools.py``); ``approvalTimeoutMs``: how long a call that asks waits for the
    user's answer before it counts as denied; ``askFirst``: a step that offers tools first
    asks the model which one the message needs (docs/tools.md; false: the model decides
    inside its action, as a larger model can)."""

    mcp_servers: dict[Annotated[str, Meta(pattern=TOOL_SERVER_PATTERN)], McpServerConfig] = \
        msgspec.field(default_factory=dict)
    offer_max: Annotated[int, Meta(ge=0, le=16)] = 3
    approval_timeout_ms: Annotated[int, Meta(ge=1000, le=3_600_000)] = 120_000
    ask_first: bool = True


class LoggingConfig(_C):
    """``logging``: level of the JSON log lines."""

    level: Literal["debug", "info", "warning", "error"] = "info"


class Config(_C):
    """The whole ``config.json``; every block optional, defaults as documented."""

    memory: MemoryConfig = msgspec.field(default_factory=MemoryConfig)
    llm: LLMConfig = msgspec.field(default_factory=LLMConfig)
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    agent: AgentConfig = msgspec.field(default_factory=AgentConfig)
    tools: ToolsConfig = msgspec.field(default_factory=ToolsConfig)
    logging: LoggingConfig = msgspec.field(default_factory=LoggingConfig)


_PATH_RE = re.compile(r"\s*-\s*at\s*`\$(?P<path>[^`]*)`")


def key_paths(blocks: bool = False) -> list[str]:
    """Every settable key path of :class:`Config` (leaves of its defaults; a list or a
    value that defaults to null is a leaf too); with ``blocks`` the blocks' own paths
    (``memory``, ``memory.reflection``) too."""
    out: list[str] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            if blocks and prefix:
                out.append(prefix)
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out.append(prefix)

    walk("", msgspec.to_builtins(Config()))
    return out


def unknown_key(path: str) -> ConfigError:
    """A ConfigError for ``path`` that suggests the nearest valid key paths."""
    paths = key_paths(blocks=True)
    near = difflib.get_close_matches(path, paths, n=3, cutoff=0.6)
    if not near:  # a typo in the last part only: compare that part under the same block
        block, _, last = path.rpartition(".")
        siblings = [p for p in paths if p.rpartition(".")[0] == block]
        near = [f"{block}.{m}" if block else m for m in difflib.get_close_matches(
            last, [p.rpartition(".")[2] for p in siblings], n=3, cutoff=0.5)]
    hint = f"; did you mean {' or '.join(near)}?" if near else \
        "; `atomic-agent config show` lists every key"
    return ConfigError(f"unknown key {path!r}{hint}")


def _friendly(err: msgspec.ValidationError) -> str:
    text = str(err)
    m = _PATH_RE.search(text)
    path = m.group("path").lstrip(".") if m else ""
    msg = _PATH_RE.sub("", text)
    unknown = re.match(r"Object contains unknown field `([^`]+)`", msg)
    if unknown:
        path = f"{path}.{unknown.group(1)}" if path else unknown.group(1)
        hint = str(unknown_key(path)).partition("; ")[2]
        msg = "unknown key" + (f"; {hint}" if hint.startswith("did you mean") else "")
    return f"{path or '(top level)'}: {msg}"


def parse_config(data: bytes | str, *, source: str = "config.json") -> Config:
    """Decode JSON text into a :class:`Config`; ConfigError names the bad key path. A
    leading UTF-8 byte order mark (Windows editors write one) is ignored."""
    if isinstance(data, bytes) and data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    elif isinstance(data, str) and data.startswith("\ufeff"):
        data = data[1:]
    try:
        return msgspec.json.decode(data, type=Config)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{source}: {_friendly(exc)}") from None
    except msgspec.DecodeError as exc:
        where = ""
        try:  # the stdlib parser says where (msgspec does not for truncated input)
            json.loads(data)
        except json.JSONDecodeError as jexc:
            where = f" at line {jexc.lineno}, column {jexc.colno}"
        except (UnicodeDecodeError, TypeError):
            pass
        raise ConfigError(f"{source}: not valid JSON{where} ({exc})") from None


def load_config(state_dir: Path) -> Config:
    """Read ``<state_dir>/config.json`` (defaults when absent). Errors: ConfigError."""
    path = state_dir / "config.json"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Config()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    return parse_config(data, source=str(path))


def config_to_builtins(cfg: Config) -> dict[str, Any]:
    """The configuration as JSON-ready data with secrets (``llm.apiKey``, each
    ``llm.fallbacks[].apiKey``, ``memory.embeddings.apiKey``, ``memory.store.url``, an MCP
    server's ``headers`` and the ``env`` values whose names say secret) masked as
    ``***``."""
    data: dict[str, Any] = msgspec.to_builtins(cfg)
    for block in [data["llm"], *data["llm"].get("fallbacks", []),
                  data["memory"]["embeddings"]]:
        if block.get("apiKey"):
            block["apiKey"] = "***"
    store = data["memory"]["store"]
    if store.get("url"):
        store["url"] = "***"
    for server in data["tools"]["mcpServers"].values():
        server["headers"] = {k: "***" for k in server.get("headers", {})}
        server["env"] = {k: "***" if secret_name(k) else v
                         for k, v in server.get("env", {}).items()}
    return data


def secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret."""
    return any(w in name.upper() for w in ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASS",
                                          "AUTH", "CREDENTIAL"))


def config_to_json(cfg: Config) -> str:
    """The effective configuration, pretty-printed (``atomic-agent config show``),
    secrets masked (:func:`config_to_builtins`)."""
    return json.dumps(config_to_builtins(cfg), indent=2)


class ActorBoot(msgspec.Struct):
    """What every actor receives in its ``Boot`` envelope.

    Attributes:
        state_dir: absolute path of the state directory, readable (a byte of the path
            that is not UTF-8 shows as U+FFFD here; open files with :attr:`path`).
        config: the effective configuration.
        llm_url: base URL of the LLM server in use ("" when none).
        state_dir_raw: the path's bytes when it is not valid UTF-8 (set on
            construction: a ``surrogateescape`` str cannot cross the msgpack boundary),
            else None.
    """

    state_dir: str
    config: Config
    llm_url: str = ""
    state_dir_raw: bytes | None = None

    def __post_init__(self) -> None:
        if has_lone_surrogates(self.state_dir):
            self.state_dir_raw = os.fsencode(self.state_dir)
            self.state_dir = repair(self.state_dir)

    @property
    def path(self) -> Path:
        """The state directory as the operating system names it (lossless)."""
        if self.state_dir_raw is not None:
            return Path(os.fsdecode(self.state_dir_raw))
        return Path(self.state_dir)
