"""The memory schema on PostgreSQL: versioned migrations, tenants, row-level security.

The tables are the SQLite schema's (:mod:`actors.store.schema`, at its newest version)
with three differences (docs/teams.md):

* every row carries ``tenant_id`` (default: the session's ``app.tenant``), and a
  row-level security policy on every table shows and accepts only the session's own
  tenant's rows, also to the tables' owner (``FORCE ROW LEVEL SECURITY``); a superuser
  login runs as :data:`~actors.store.pg.connection.MEMBER_ROLE`, which bypasses nothing;
* keyword search reads a ``tsvector`` column, ``search``, holding the very tokens (with
  their positions) the SQLite engine's FTS5 table holds for a note, and its length in
  tokens, ``doc_len`` (:mod:`actors.store.pg.search` ranks with them as FTS5 does);
  a GIN index finds the notes;
* a note's vector is kept twice: the float32 bytes the recall scan reads (``vector``,
  as on SQLite, so both engines score the same) and a pgvector value (``embedding``)
  for the server's own cosine search, through an HNSW index per dimension (v2: a
  partial index on ``embedding::vector(<dim>)``, made by
  ``atomic_agent_vector_index(dim)`` when a dimension is first written — pgvector's
  HNSW needs a dimension, and each embedding model has its own).

:data:`MIGRATIONS` is append-only, like SQLite's: step ``i`` brings version ``i`` to
``i + 1``; the version is in ``atomic_agent_schema``. :func:`migrate` runs under a
transaction-scoped advisory lock, so two daemons starting at once apply each step once,
and refuses a schema newer than this code (:class:`SchemaTooNew`).
"""

from __future__ import annotations

from typing import Any

import psycopg

from runtime.kernel.actor import first_line

from ..errors import DatabaseUnavailable, SchemaTooNew
from .connection import MEMBER_ROLE

__all__ = ["HNSW_MAX_DIM", "MIGRATIONS", "SCHEMA_VERSION", "TENANT_ROLES", "TENANT_TABLES",
           "VECTOR_INDEX_FUNCTION", "migrate", "schema_version"]

TENANT_TABLES = ("profile_facts", "memories", "memory_vectors", "memory_links", "lessons",
                 "procedures", "votes", "activity", "activity_meta", "activity_totals")
"""Every table whose rows belong to one tenant (row-level security on each)."""

_LOCK_KEY = 0x41414731
"""The advisory lock migrations take (the SQLite file's application id, "AAG1")."""

_TENANT = "tenant_id TEXT NOT NULL DEFAULT current_setting('app.tenant')"

_V1 = f"""
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE profile_facts (
    id              BIGSERIAL PRIMARY KEY,
    {_TENANT},
    key             TEXT    NOT NULL,
    value           TEXT    NOT NULL,
    pinned          INTEGER NOT NULL DEFAULT 1 CHECK (pinned IN (0, 1)),
    keywords        TEXT    NOT NULL DEFAULT '[]',
    valid_from      BIGINT  NOT NULL,
    superseded_by   BIGINT,
    supersedes      BIGINT,
    created_at      BIGINT  NOT NULL,
    updated_at      BIGINT  NOT NULL,
    source          TEXT,
    session_id      TEXT,
    turn_id         TEXT,
    vote_score      DOUBLE PRECISION NOT NULL DEFAULT 0,
    removed_by      TEXT,
    removed_turn_id TEXT
);
CREATE UNIQUE INDEX idx_profile_active_key ON profile_facts(tenant_id, key)
    WHERE superseded_by IS NULL;
CREATE INDEX idx_profile_key_history ON profile_facts(tenant_id, key, valid_from, id);
CREATE INDEX idx_profile_chain ON profile_facts(superseded_by);

CREATE TABLE memories (
    id                BIGSERIAL PRIMARY KEY,
    {_TENANT},
    content           TEXT    NOT NULL,
    content_key       TEXT    NOT NULL DEFAULT '',
    tags              TEXT    NOT NULL DEFAULT '[]',
    source            TEXT    NOT NULL DEFAULT 'agent' CHECK (source IN ('agent', 'user')),
    scope             TEXT    NOT NULL DEFAULT 'all' CHECK (scope IN ('all', 'project')),
    working_dir       TEXT,
    session_id        TEXT,
    created_at        BIGINT  NOT NULL,
    updated_at        BIGINT  NOT NULL,
    recall_count      INTEGER NOT NULL DEFAULT 0,
    last_recalled_at  BIGINT,
    archived          INTEGER NOT NULL DEFAULT 0 CHECK (archived IN (0, 1)),
    origin            TEXT,
    turn_id           TEXT,
    vote_score        DOUBLE PRECISION NOT NULL DEFAULT 0,
    consolidated_into BIGINT,
    consolidating_at  BIGINT,
    batch_id          TEXT,
    search            TSVECTOR NOT NULL DEFAULT '',
    doc_len           INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX idx_memories_updated ON memories(tenant_id, updated_at, id);
CREATE INDEX idx_memories_working_dir ON memories(tenant_id, working_dir);
CREATE INDEX idx_memories_content_key ON memories(tenant_id, content_key);
CREATE INDEX idx_memories_utility ON memories(tenant_id, vote_score, recall_count,
    COALESCE(last_recalled_at, 0), updated_at, id);
CREATE INDEX idx_memories_consolidated ON memories(consolidated_into)
    WHERE consolidated_into IS NOT NULL;
CREATE INDEX idx_memories_search ON memories USING GIN (search);

CREATE TABLE memory_vectors (
    id         BIGSERIAL PRIMARY KEY,
    {_TENANT},
    note_id    BIGINT  NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    model      TEXT    NOT NULL,
    dim        INTEGER NOT NULL CHECK (dim > 0),
    vector     BYTEA   NOT NULL CHECK (length(vector) = dim * 4),
    embedding  vector  NOT NULL CHECK (vector_dims(embedding) = dim),
    created_at BIGINT  NOT NULL,
    UNIQUE (note_id, model)
);
CREATE INDEX idx_memory_vectors_scan ON memory_vectors(tenant_id, model, dim, note_id);

CREATE TABLE memory_links (
    {_TENANT},
    from_id    BIGINT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    to_id      BIGINT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    kind       TEXT   NOT NULL CHECK (kind IN ('RELATES_TO', 'CAUSED_BY', 'REFERENCES',
                                               'CONTRADICTS', 'DUPLICATES', 'SUPERSEDES')),
    weight     DOUBLE PRECISION NOT NULL DEFAULT 1.0,
    created_at BIGINT NOT NULL,
    origin     TEXT   NOT NULL DEFAULT 'manual'
                      CHECK (origin IN ('manual', 'similarity', 'model', 'correction')),
    PRIMARY KEY (from_id, to_id, kind),
    CHECK (from_id <> to_id)
);
CREATE INDEX idx_memory_links_to ON memory_links(to_id);
CREATE INDEX idx_memory_links_kind ON memory_links(tenant_id, kind);

CREATE TABLE lessons (
    id            BIGSERIAL PRIMARY KEY,
    {_TENANT},
    activation    TEXT    NOT NULL,
    principle     TEXT    NOT NULL,
    tags          TEXT    NOT NULL DEFAULT '[]',
    status        TEXT    NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'deprecated')),
    success_count INTEGER NOT NULL DEFAULT 0,
    failure_count INTEGER NOT NULL DEFAULT 0,
    parent_ids    TEXT    NOT NULL DEFAULT '[]',
    working_dir   TEXT,
    created_at    BIGINT  NOT NULL,
    updated_at    BIGINT  NOT NULL,
    deprecated_at BIGINT,
    vote_score    DOUBLE PRECISION NOT NULL DEFAULT 0,
    search        TSVECTOR NOT NULL DEFAULT '',
    doc_len       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX idx_lessons_status ON lessons(tenant_id, status);
CREATE INDEX idx_lessons_updated ON lessons(tenant_id, updated_at, id);
CREATE INDEX idx_lessons_search ON lessons USING GIN (search);

CREATE TABLE procedures (
    id                BIGSERIAL PRIMARY KEY,
    {_TENANT},
    activation        TEXT    NOT NULL,
    steps             TEXT    NOT NULL,
    tags              TEXT    NOT NULL DEFAULT '[]',
    status            TEXT    NOT NULL DEFAULT 'active'
                              CHECK (status IN ('active', 'deprecated')),
    success_count     INTEGER NOT NULL DEFAULT 0,
    failure_count     INTEGER NOT NULL DEFAULT 0,
    use_count         INTEGER NOT NULL DEFAULT 0,
    parent_lesson_ids TEXT    NOT NULL DEFAULT '[]',
    parent_memory_ids TEXT    NOT NULL DEFAULT '[]',
    source            TEXT    NOT NULL DEFAULT 'consolidator'
                              CHECK (source IN ('consolidator', 'manual')),
    working_dir       TEXT,
    created_at        BIGINT  NOT NULL,
    updated_at        BIGINT  NOT NULL,
    deprecated_at     BIGINT,
    vote_score        DOUBLE PRECISION NOT NULL DEFAULT 0,
    search            TSVECTOR NOT NULL DEFAULT '',
    doc_len           INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX idx_procedures_status ON procedures(tenant_id, status);
CREATE INDEX idx_procedures_updated ON procedures(tenant_id, updated_at, id);
CREATE INDEX idx_procedures_search ON procedures USING GIN (search);

CREATE TABLE votes (
    id         BIGSERIAL PRIMARY KEY,
    {_TENANT},
    kind       TEXT    NOT NULL CHECK (kind IN ('memory', 'lesson', 'profile', 'procedure')),
    target_id  BIGINT  NOT NULL,
    direction  INTEGER NOT NULL CHECK (direction IN (-1, 1)),
    session_id TEXT,
    turn_index INTEGER,
    created_at BIGINT  NOT NULL
);
CREATE INDEX idx_votes_created ON votes(tenant_id, created_at);
CREATE INDEX idx_votes_target ON votes(kind, target_id);

CREATE TABLE activity (
    id       BIGSERIAL PRIMARY KEY,
    {_TENANT},
    at       BIGINT  NOT NULL,
    client   TEXT    NOT NULL,
    op       TEXT    NOT NULL,
    ids      TEXT    NOT NULL DEFAULT '[]',
    outcome  TEXT    NOT NULL,
    writes   INTEGER NOT NULL DEFAULT 0,
    kind     TEXT    NOT NULL DEFAULT 'read',
    count    INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX activity_client ON activity(tenant_id, client, id);
CREATE INDEX activity_kind ON activity(tenant_id, kind, id);
CREATE TABLE activity_meta (
    {_TENANT},
    name  TEXT   NOT NULL,
    value BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
CREATE TABLE activity_totals (
    {_TENANT},
    client    TEXT    NOT NULL,
    reads     BIGINT  NOT NULL DEFAULT 0,
    writes    BIGINT  NOT NULL DEFAULT 0,
    refusals  BIGINT  NOT NULL DEFAULT 0,
    last_at   BIGINT  NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, client)
);
"""

_POLICIES = "\n".join(
    f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY;\n"
    f"ALTER TABLE {t} FORCE ROW LEVEL SECURITY;\n"
    f"CREATE POLICY {t}_tenant ON {t}\n"
    f"    USING (tenant_id = current_setting('app.tenant', true))\n"
    f"    WITH CHECK (tenant_id = current_setting('app.tenant', true));"
    for t in TENANT_TABLES)

_GRANTS = f"""
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{MEMBER_ROLE}') THEN
        CREATE ROLE {MEMBER_ROLE} NOLOGIN NOBYPASSRLS;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'no CREATEROLE: row-level security applies to the tables'' owner';
END $$;
DO $$ BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{MEMBER_ROLE}') THEN
        EXECUTE 'GRANT USAGE ON SCHEMA ' || quote_ident(current_schema())
                || ' TO {MEMBER_ROLE}';
        EXECUTE 'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA '
                || quote_ident(current_schema()) || ' TO {MEMBER_ROLE}';
        EXECUTE 'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA '
                || quote_ident(current_schema()) || ' TO {MEMBER_ROLE}';
    END IF;
END $$;
"""

VECTOR_INDEX_FUNCTION = "atomic_agent_vector_index"
"""Makes the HNSW index of one dimension (``SECURITY DEFINER``: the member role, which
owns no table, may call it; concurrent callers wait on the migration lock)."""

HNSW_MAX_DIM = 2000
"""pgvector's HNSW indexes vectors of at most 2,000 dimensions
(https://github.com/pgvector/pgvector#hnsw); larger ones are searched without it."""

_V2 = f"""
CREATE FUNCTION {VECTOR_INDEX_FUNCTION}(d integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $fn$
BEGIN
    IF d IS NULL OR d < 1 OR d > {HNSW_MAX_DIM} THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock({_LOCK_KEY});
    EXECUTE format('CREATE INDEX IF NOT EXISTS memory_vectors_hnsw_%s ON memory_vectors '
                   'USING hnsw ((embedding::vector(%s)) vector_cosine_ops) WHERE dim = %s',
                   d, d, d);
END
$fn$;
REVOKE ALL ON FUNCTION {VECTOR_INDEX_FUNCTION}(integer) FROM PUBLIC;
DO $$ BEGIN
    EXECUTE format('ALTER FUNCTION {VECTOR_INDEX_FUNCTION}(integer) '
                   'SET search_path = %I, public, pg_temp', current_schema());
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{MEMBER_ROLE}') THEN
        GRANT EXECUTE ON FUNCTION {VECTOR_INDEX_FUNCTION}(integer) TO {MEMBER_ROLE};
    END IF;
END $$;
"""
"""v2: the HNSW index of each embedding dimension, made on first use."""

TENANT_ROLES = "atomic_agent_tenant_roles"
"""Which database role may use a tenant (v3): ``(tenant_id, role)``, written by an
operator with the owner's login (docs/teams.md, "One login per person")."""

_ALLOWED = "atomic_agent_tenant_allowed"

_V3 = f"""
CREATE TABLE {TENANT_ROLES} (
    tenant_id TEXT PRIMARY KEY,
    role      NAME NOT NULL
);
CREATE FUNCTION {_ALLOWED}() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER AS $fn$
    SELECT NOT EXISTS (
        SELECT 1 FROM {TENANT_ROLES} r
        WHERE r.tenant_id = current_setting('app.tenant', true)
          AND CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r.role)
                   THEN NOT pg_has_role(session_user, r.role, 'MEMBER')
                   ELSE true END)
$fn$;
REVOKE ALL ON FUNCTION {_ALLOWED}() FROM PUBLIC;
DO $$ BEGIN
    EXECUTE format('ALTER FUNCTION {_ALLOWED}() SET search_path = %I, pg_temp',
                   current_schema());
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{MEMBER_ROLE}') THEN
        GRANT EXECUTE ON FUNCTION {_ALLOWED}() TO {MEMBER_ROLE};
    END IF;
END $$;
""" + "\n".join(
    f"ALTER POLICY {t}_tenant ON {t}\n"
    f"    USING (tenant_id = current_setting('app.tenant', true) AND (SELECT {_ALLOWED}()))\n"
    f"    WITH CHECK (tenant_id = current_setting('app.tenant', true)"
    f" AND (SELECT {_ALLOWED}()));"
    for t in TENANT_TABLES)
"""v3: a tenant bound to a database role (:data:`TENANT_ROLES`) is usable only by a
login that is that role or a member of it (``session_user``, so ``SET ROLE`` does not
get round it); an unbound tenant stays as before (the session's ``app.tenant``). The
check is a scalar subquery with no column in it, an InitPlan PostgreSQL runs once per
statement: called bare in the policy it ran once per row (a SECURITY DEFINER function is
never inlined), 5 µs a row, and made a turn's memory work three times slower."""

MIGRATIONS: tuple[str, ...] = (_V1 + _POLICIES + _GRANTS, _V2, _V3)
"""Ordered migration scripts; ``MIGRATIONS[i]`` upgrades version ``i`` to ``i + 1``.
Append only once released: never edit a released step, add one."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The newest schema version this code knows."""

_META = """
CREATE TABLE IF NOT EXISTS atomic_agent_schema (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
)
"""


def schema_version(conn: psycopg.Connection[Any]) -> int:
    """The database's schema version (0 before the first migration)."""
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass('atomic_agent_schema') IS NOT NULL")
        row = cur.fetchone()
        if not row or not row[0]:
            return 0
        cur.execute("SELECT value FROM atomic_agent_schema WHERE name = 'version'")
        found = cur.fetchone()
    return int(found[0]) if found else 0


def migrate(conn: psycopg.Connection[Any], stop_before: int | None = None) -> int:
    """Bring the database to :data:`SCHEMA_VERSION` (or below ``stop_before``); the
    version reached. One transaction per step, under an advisory lock, the version
    re-read inside it: concurrent daemons apply each step once.

    ``conn``: an admin session (the login role, not the member role), autocommit.
    Raises SchemaTooNew (a newer schema: nothing changed), DatabaseUnavailable (no
    ``vector`` extension, no right to create tables, …: one line saying which)."""
    target = SCHEMA_VERSION if stop_before is None else min(stop_before - 1, SCHEMA_VERSION)
    try:
        if stop_before is None and schema_version(conn) == SCHEMA_VERSION:
            return SCHEMA_VERSION  # nothing to do: also for a login that owns no table
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            conn.execute(_META)
        version = schema_version(conn)
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(version, SCHEMA_VERSION)
        if version == 0 and not conn.execute(
                "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone():
            raise DatabaseUnavailable(_NO_PGVECTOR)
        while version < target:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                version = schema_version(conn)
                if version >= target:
                    break
                conn.execute(MIGRATIONS[version])
                conn.execute("INSERT INTO atomic_agent_schema (name, value) VALUES "
                             "('version', %s) ON CONFLICT (name) DO UPDATE SET "
                             "value = EXCLUDED.value", (version + 1,))
                version += 1
        with conn.transaction():  # (concurrent GRANTs on one table fail: take the lock)
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            if _has_member(conn):
                conn.execute(f"GRANT SELECT ON atomic_agent_schema TO {MEMBER_ROLE}")
    except psycopg.errors.InsufficientPrivilege as exc:
        raise DatabaseUnavailable(
            f"this login may not create or change the memory schema ({first_line(exc)}): "
            "start one daemon with the database owner's login first, then the others "
            "(docs/teams.md, \"One login per person\")") from None
    except psycopg.errors.FeatureNotSupported as exc:
        raise DatabaseUnavailable("PostgreSQL cannot create the memory schema: "
                                  f"{first_line(exc)}") from None
    except psycopg.errors.UndefinedFile:
        raise DatabaseUnavailable(_NO_PGVECTOR) from None
    except psycopg.Error as exc:
        raise DatabaseUnavailable("PostgreSQL refused the memory schema: "
                                  f"{first_line(exc)}") from None
    return version


_NO_PGVECTOR = ("the PostgreSQL server has no pgvector extension (`vector`): install "
                "pgvector on the server (https://github.com/pgvector/pgvector#installation)")


def _has_member(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (MEMBER_ROLE,)).fetchone()
    return row is not None
