"""Memory export and import: a versioned JSON-lines file.

The file, one JSON object per line, ``type`` first:

* ``{"type": "atomic-agent.memory", "version": 1, "schemaVersion", "exportedAt",
  "counts"}`` -- the header, always the first line;
* ``{"type": "fact", "key", "active": bool, "versions": [{"value", "pinned",
  "keywords", "validFrom", "createdAt", "updatedAt", "source", "sessionId", "turnId",
  "removedBy", "removedTurnId"}, …]}`` -- one per profile key, its whole history oldest
  first; ``active``: the last version is the key's current value (false once the fact
  was removed); ``source`` is who wrote the version (``reflection``, ``tool``, ``user``,
  ``import``; null = unknown), ``removedBy`` who ended it (``agent for chat``,
  ``dashboard``, ...; null = active or unknown), ``removedTurnId`` in which turn;
* ``{"type": "note", "id", "content", "tags", "source", "scope", "workingDir",
  "sessionId", "createdAt", "updatedAt", "recallCount", "lastRecalledAt", "archived",
  "origin", "turnId", "batchId"}`` (``origin`` as a fact version's ``source``;
  ``batchId`` the writer's batch of a note written outside a session, see below);
* ``{"type": "link", "fromId", "toId", "kind", "weight", "createdAt", "origin"}`` (note ids of
  this file);
* ``{"type": "lesson", "id", "activation", "principle", "tags", "status",
  "successCount", "failureCount", "parentIds", "workingDir", "createdAt", "updatedAt",
  "deprecatedAt"}``;
* ``{"type": "procedure", "id", "activation", "steps", "tags", "status",
  "successCount", "failureCount", "useCount", "parentLessonIds", "parentMemoryIds",
  "source", "workingDir", "createdAt", "updatedAt", "deprecatedAt"}``.

Times are Unix milliseconds. Vectors are not exported (the backfill actor embeds the
imported notes with whatever embedder the target runs); votes are not either (they
decay within days). An export is read in one transaction, so it is one snapshot.

Import is idempotent: the whole file is checked first, line by line (a bad line is one
error naming the line; nothing is written), then written in transactions of
:data:`IMPORT_CHUNK` records, the file read again for each of three passes, so a large
file imports in bounded memory and beside running turns (:func:`import_steps`). A note
whose text is already stored (same :func:`content_key`, or near-identical, as
:meth:`MemoryStore.store` deduplicates) is not added again; a fact version already in
the key's history (same value and ``validFrom``) is skipped, and an imported current
value becomes the key's current value only when it is newer than the one there; lessons
and procedures with the same text, and links already present, are skipped. Ids are
the target's own: links and parent ids are mapped through the imported notes. What an
import adds has the provenance ``import`` (session and turn kept from the file). A note
the file gives neither a ``sessionId`` nor a ``batchId`` gets this import's own batch id
(``import-<10 hex>``), so the notes one import adds in a row are each other's context in
recall, as a session's are; a file's ``batchId`` is kept.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from datetime import datetime, timezone
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal, TypedDict, cast

import msgspec

from .clock import CLOCK, FUTURE_LIMIT_MS
from .dedup import near_match
from .distilled import index_distilled
from .errors import ValidationError, optional_text
from .files import FileRoom
from .fts import content_key
from .recall import index_note
from .notes import MemoryStore, validate_content, validate_tags
from .profile import validate_key, validate_value
from .schema import SCHEMA_VERSION, write_txn
from .sql import Connection, bytewise

__all__ = ["FORMAT", "FORMAT_VERSION", "IMPORT_CHUNK", "ExportResult", "ImportResult",
           "export_memory", "import_memory", "import_steps"]

FORMAT = "atomic-agent.memory"
FORMAT_VERSION = 1


class _S(msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=False):
    """Base of file records: camelCase keys; fields a newer writer adds are ignored."""


class Header(_S, tag="atomic-agent.memory", tag_field="type", kw_only=True):
    version: int
    schema_version: int | None = None
    exported_at: int | None = None


class FactVersion(_S, kw_only=True):
    value: str
    pinned: bool = True
    keywords: list[str] = []
    valid_from: int
    created_at: int | None = None
    updated_at: int | None = None
    source: str | None = None
    session_id: str | None = None
    turn_id: str | None = None
    removed_by: str | None = None
    removed_turn_id: str | None = None


class FactRec(_S, tag="fact", tag_field="type", kw_only=True):
    key: str
    active: bool = True
    versions: list[FactVersion]


class NoteRec(_S, tag="note", tag_field="type", kw_only=True):
    id: int
    content: str
    tags: list[str] = []
    source: Literal["agent", "user"] = "user"
    scope: Literal["all", "project"] = "all"
    working_dir: str | None = None
    session_id: str | None = None
    created_at: int
    updated_at: int | None = None
    recall_count: int = 0
    last_recalled_at: int | None = None
    archived: bool = False
    origin: str | None = None
    turn_id: str | None = None
    batch_id: str | None = None


class LinkRec(_S, tag="link", tag_field="type", kw_only=True):
    from_id: int
    to_id: int
    kind: Literal["RELATES_TO", "CAUSED_BY", "REFERENCES", "CONTRADICTS", "DUPLICATES",
                  "SUPERSEDES"]
    weight: float = 1.0
    created_at: int | None = None
    origin: Literal["manual", "similarity", "model", "correction"] = "manual"


class LessonRec(_S, tag="lesson", tag_field="type", kw_only=True):
    id: int
    activation: str
    principle: str
    tags: list[str] = []
    status: Literal["active", "deprecated"] = "active"
    success_count: int = 0
    failure_count: int = 0
    parent_ids: list[int] = []
    working_dir: str | None = None
    created_at: int
    updated_at: int | None = None
    deprecated_at: int | None = None


class ProcedureRec(_S, tag="procedure", tag_field="type", kw_only=True):
    id: int
    activation: str
    steps: list[Any]
    tags: list[str] = []
    status: Literal["active", "deprecated"] = "active"
    success_count: int = 0
    failure_count: int = 0
    use_count: int = 0
    parent_lesson_ids: list[int] = []
    parent_memory_ids: list[int] = []
    source: Literal["consolidator", "manual"] = "manual"
    working_dir: str | None = None
    created_at: int
    updated_at: int | None = None
    deprecated_at: int | None = None


Record = Header | FactRec | NoteRec | LinkRec | LessonRec | ProcedureRec
_decode = msgspec.json.Decoder(Record)
_encode = msgspec.json.Encoder()


class ExportResult(TypedDict):
    """What :func:`export_memory` answers: the file, its size and the records of each
    kind (``facts``, ``factVersions``, ``notes``, ``links``, ``lessons``,
    ``procedures``)."""

    path: str
    bytes: int
    counts: dict[str, int]


class ImportResult(TypedDict):
    """What an import answers (:func:`import_memory`): per kind (``factVersions``,
    ``notes``, ``links``, ``lessons``, ``procedures``) the records added and skipped,
    and the ids of the notes it added."""

    path: str
    added: dict[str, int]
    skipped: dict[str, int]
    noteIds: list[int]


def _now() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------------------- export
def export_memory(conn: Connection, path: str, room: FileRoom, *,
                  overwrite: bool = False) -> ExportResult:
    """Write every fact (with history), note, link, lesson and procedure of ``conn`` to
    the file ``path`` names in ``room`` (:class:`~actors.store.files.FileRoom`) as the
    JSON-lines file of the module docstring, through a private temporary file renamed
    into place. Returns ``{"path", "bytes", "counts": {"facts", "factVersions",
    "notes", "links", "lessons", "procedures"}}``.

    Raises ValidationError (field ``path``): a name the room refuses, missing folder,
    existing file without ``overwrite`` (or one that is not a regular file), a file that
    cannot be written.
    """
    target = room.target(path, overwrite)
    counts = {"facts": 0, "factVersions": 0, "notes": 0, "links": 0, "lessons": 0,
              "procedures": 0}
    with conn:  # one read transaction: the export is one snapshot
        lines = list(_records(conn, counts))
    with room.writing(target) as tmp, open(tmp, "wb") as out:
        header = {"type": FORMAT, "version": FORMAT_VERSION,
                  "schemaVersion": SCHEMA_VERSION, "exportedAt": _now(), "counts": counts}
        out.write(_encode.encode(header) + b"\n")
        for line in lines:
            out.write(line + b"\n")
        out.flush()
        os.fsync(out.fileno())
    return {"path": str(target), "bytes": target.stat().st_size, "counts": counts}


def _records(conn: Connection, counts: dict[str, int]) -> Iterator[bytes]:
    """Yield the encoded record lines (facts, notes, links, lessons, procedures)."""
    rows = conn.execute(
        "SELECT key, value, pinned, keywords, valid_from, created_at, updated_at,"
        " superseded_by, source, session_id, turn_id, removed_by, removed_turn_id"
        f" FROM profile_facts ORDER BY {bytewise(conn, 'key')}, valid_from, id").fetchall()
    by_key: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        by_key.setdefault(cast(str, row[0]), []).append(row)
    for key, versions in by_key.items():
        counts["facts"] += 1
        counts["factVersions"] += len(versions)
        yield _encode.encode({"type": "fact", "key": key,
                              "active": versions[-1][7] is None, "versions": [
                                  {"value": v[1], "pinned": bool(v[2]),
                                   "keywords": json.loads(v[3]), "validFrom": v[4],
                                   "createdAt": v[5], "updatedAt": v[6], "source": v[8],
                                   "sessionId": v[9], "turnId": v[10],
                                   "removedBy": v[11], "removedTurnId": v[12]}
                                  for v in versions]})
    for kind, table, columns, order in _TABLES:
        names = [_camel(c) for c in columns]
        for row in conn.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {order}"):
            counts[kind + "s"] += 1
            record: dict[str, object] = {"type": kind}
            for column, name, value in zip(columns, names, row):
                record[name] = (json.loads(value) if column in _JSON_COLUMNS
                                else bool(value) if column in _BOOL_COLUMNS else value)
            yield _encode.encode(record)


_TABLES = (
    ("note", "memories", ("id", "content", "tags", "source", "scope", "working_dir",
                          "session_id", "created_at", "updated_at", "recall_count",
                          "last_recalled_at", "archived", "origin", "turn_id", "batch_id"),
     "id"),
    ("link", "memory_links", ("from_id", "to_id", "kind", "weight", "created_at", "origin"),
     "created_at, from_id, to_id"),
    ("lesson", "lessons", ("id", "activation", "principle", "tags", "status", "success_count",
                           "failure_count", "parent_ids", "working_dir", "created_at",
                           "updated_at", "deprecated_at"), "id"),
    ("procedure", "procedures", ("id", "activation", "steps", "tags", "status",
                                 "success_count", "failure_count", "use_count",
                                 "parent_lesson_ids", "parent_memory_ids", "source",
                                 "working_dir", "created_at", "updated_at", "deprecated_at"),
     "id"),
)
"""(record type, table, exported columns, order) of the tables exported row by row."""
_JSON_COLUMNS = {"tags", "parent_ids", "steps", "parent_lesson_ids", "parent_memory_ids"}
_BOOL_COLUMNS = {"archived"}


def _camel(column: str) -> str:
    head, *rest = column.split("_")
    return head + "".join(part.title() for part in rest)


# ---------------------------------------------------------------------------- import
def _bad_number(value: object, latest: int, field: str = "") -> str | None:
    """Why a decoded record's numbers cannot be stored, or None: an integer outside
    SQLite's 64 bits, a time (``…At``, ``validFrom``) before 1970 or after ``latest``
    (more than :data:`~actors.store.clock.FUTURE_LIMIT_MS` ahead of now: one such time
    would date every later write after it)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if (why := _bad_number(item, latest, key)) is not None:
                return why
    elif isinstance(value, list):
        for item in value:
            if (why := _bad_number(item, latest, field)) is not None:
                return why
    elif isinstance(value, int) and not isinstance(value, bool):
        if not -(2**63) <= value < 2**63:
            return f"{field or 'a number'} {value} is out of range"
        if field.endswith("At") or field == "validFrom":
            if value < 0:
                return f"{field} {value} is before 1970"
            if value > latest:
                when = datetime.fromtimestamp(min(value, 253402300799000) / 1000,
                                              timezone.utc).strftime("%Y-%m-%d")
                return (f"{field} is {when}, more than a day ahead of this machine's clock "
                        "(a time from the future would date every later write after it)")
    return None


IMPORT_CHUNK = 500
"""Records written per transaction by an import (:func:`import_steps`); between two the
memory actor serves other requests, so a long import never holds a turn up."""


def _check(rec: Record, notes: MemoryStore) -> None:
    """The field checks a record's write would make, made before anything is written
    (ValidationError naming the field)."""
    match rec:
        case NoteRec():
            validate_content(rec.content, notes.max_content_chars)
            validate_tags(rec.tags)
            if rec.scope == "project" and optional_text(rec.working_dir, "workingDir") is None:
                raise ValidationError("workingDir", "project notes need a workingDir")
            for value, field in ((rec.session_id, "sessionId"), (rec.turn_id, "turnId"),
                                 (rec.batch_id, "batchId")):
                optional_text(value, field)
        case FactRec():
            validate_key(rec.key)
            for version in rec.versions:
                validate_value(version.value)
                for value, field in ((version.session_id, "sessionId"),
                                     (version.turn_id, "turnId"),
                                     (version.removed_by, "removedBy"),
                                     (version.removed_turn_id, "removedTurnId")):
                    optional_text(value, field)


def _lines(f: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """``(line number, line)`` of a file from its start, blank lines left out."""
    f.seek(0)
    for number, line in enumerate(f, 1):
        if line.strip():
            yield number, line


def _scan(source: Path, f: BinaryIO, notes: MemoryStore) -> int:
    """Check the whole file, line by line, holding no record (module docstring): the
    first record is the header, every line decodes and passes the checks of
    :func:`_bad_number` and :func:`_check`, no id repeats. Returns the number of records.
    Raises ValidationError (field ``path``) naming the first bad line."""
    ids: dict[tuple[str, int], int] = {}  # (kind, id) → the line that had it first
    latest = CLOCK.source() + FUTURE_LIMIT_MS
    count = 0
    for number, line in _lines(f):
        try:
            record = _decode.decode(line)
        except msgspec.DecodeError as exc:
            raise ValidationError("path", f"{source.name} line {number}: {exc}") from None
        if not count and not isinstance(record, Header):
            raise ValidationError("path", f"{source.name} is not an atomic-agent memory "
                                          f"export (line {number} is not its header)")
        if isinstance(record, Header):
            if count:
                raise ValidationError("path", f"{source.name} line {number}: a second header")
            if record.version > FORMAT_VERSION:
                raise ValidationError("path", f"{source.name} is format version "
                                              f"{record.version}; this atomic-agent reads up "
                                              f"to {FORMAT_VERSION} (upgrade it)")
        if (bad := _bad_number(msgspec.to_builtins(record), latest)) is not None:
            raise ValidationError("path", f"{source.name} line {number}: {bad}")
        try:
            _check(record, notes)
        except ValidationError as exc:
            raise ValidationError("path", f"{source.name} line {number}: {exc}") from None
        rid = getattr(record, "id", None)
        if isinstance(rid, int) and not isinstance(record, Header):
            kind = str(type(record).__struct_config__.tag)
            if (kind, rid) in ids:
                raise ValidationError("path", f"{source.name} line {number}: {kind} id {rid} "
                                              f"again (line {ids[kind, rid]} has it)")
            ids[kind, rid] = number
        count += 1
    if not count:
        raise ValidationError("path", f"{source.name} is empty")
    return count


def import_steps(notes: MemoryStore, path: str, room: FileRoom,
                 chunk: int = IMPORT_CHUNK, *, keep_provenance: bool = False
                 ) -> Generator[ImportResult | None, None, None]:
    """The import of ``path`` (in ``room``) as steps: each ``next()`` does one step and
    yields None, the last yields the result (:func:`import_memory`'s). The first step
    checks the whole file, line by line (nothing is written when a line is bad: its
    ValidationError names it); then the records are written in three passes over the
    file (notes; facts, links and lessons; procedures: each needs the ids the one before
    made), :data:`IMPORT_CHUNK` per transaction, one transaction per step. Memory holds
    the id maps, never the records: a 100,000-line file imports in bounded memory. A
    file changed between passes is refused (ValidationError); what the earlier steps
    wrote stays, and importing again completes it (an import is idempotent).

    Every fact version and note added is marked as written by ``import``, unless
    ``keep_provenance`` (``memory migrate``: the same memory on another engine), which
    keeps who wrote it as the file says."""
    conn = notes.conn
    added = dict.fromkeys(("factVersions", "notes", "links", "lessons", "procedures"), 0)
    skipped = dict(added)
    note_ids: dict[int, int] = {}
    lesson_ids: dict[int, int] = {}
    batch = f"import-{secrets.token_hex(5)}"
    with room.opened(path) as (source, f):
        stamp = os.fstat(f.fileno())
        _scan(source, f, notes)
        yield None
        newest = cast(int, conn.execute(
            "SELECT COALESCE(max(id), 0) FROM memories").fetchall()[0][0])

        def write(rec: Record) -> None:
            match rec:
                case NoteRec():
                    _import_note(conn, notes, rec, note_ids, added, skipped, batch,
                                 keep_provenance)
                case FactRec():
                    _import_fact(conn, rec, added, skipped, keep_provenance)
                case LinkRec():
                    _import_link(conn, rec, note_ids, added, skipped)
                case LessonRec():
                    _import_lesson(conn, rec, note_ids, lesson_ids, added, skipped)
                case ProcedureRec():
                    _import_procedure(conn, rec, note_ids, lesson_ids, added, skipped)

        for kinds in ((NoteRec,), (FactRec, LinkRec, LessonRec), (ProcedureRec,)):
            now = os.fstat(f.fileno())
            if (now.st_size, now.st_mtime_ns) != (stamp.st_size, stamp.st_mtime_ns):
                raise ValidationError("path", f"{source.name} changed while it was being "
                                              "imported; import it again")
            pending: list[Record] = []
            for _number, line in _lines(f):
                rec = _decode.decode(line)
                if isinstance(rec, kinds):
                    pending.append(rec)
                if len(pending) >= chunk:
                    with write_txn(conn):
                        for r in pending:
                            write(r)
                    pending = []
                    yield None
            if pending:
                with write_txn(conn):
                    for r in pending:
                        write(r)
                yield None
        if added["notes"]:
            with write_txn(conn):
                notes._evict(0)  # the store's cap holds for imported notes too
    new_ids = sorted(i for i in set(note_ids.values()) if i > newest)
    yield {"path": path, "added": added, "skipped": skipped, "noteIds": new_ids}


def import_memory(notes: MemoryStore, path: str, room: FileRoom, *,
                  keep_provenance: bool = False) -> ImportResult:
    """Import the export ``path`` names in ``room`` into ``notes``' database (module
    docstring; every step of :func:`import_steps` at once); returns ``{"path", "added":
    {"factVersions", "notes", "links", "lessons", "procedures"}, "skipped": {… same
    keys}, "noteIds": [ids of the notes added]}``.

    Raises:
        ValidationError: field ``path`` (unreadable file, bad line, newer format, a file
            changed while imported) -- nothing is written for a bad line.
    """
    for step in import_steps(notes, path, room, keep_provenance=keep_provenance):
        if step is not None:
            return step
    raise AssertionError("import_steps ends with its result")  # pragma: no cover


_SQL_SAME_TEXT = ("SELECT id FROM memories WHERE content_key = ? AND scope = ?"
                  " AND working_dir IS ? ORDER BY id LIMIT 1")
"""A stored note with the same normalised text (archived ones included)."""


def _import_note(conn: Connection, notes: MemoryStore, rec: NoteRec,
                 note_ids: dict[int, int], added: dict[str, int],
                 skipped: dict[str, int], batch: str, keep_provenance: bool = False) -> None:
    content = validate_content(rec.content, notes.max_content_chars)
    tags = validate_tags(rec.tags)
    working_dir = optional_text(rec.working_dir, "workingDir")
    if rec.scope == "project" and working_dir is None:
        raise ValidationError("workingDir", f"note {rec.id}: project notes need a workingDir")
    session_id = optional_text(rec.session_id, "sessionId")
    key = content_key(content)
    # The same text stored already, archived or not (near_match, as the store's own
    # dedup, looks at active notes only): importing a file twice adds nothing.
    same = conn.execute(_SQL_SAME_TEXT, (key, rec.scope, working_dir)).fetchall()
    dup = near_match(conn, content, key, rec.scope, working_dir,
                     notes.near_threshold if notes.dedup else None) if not same else None
    if same:
        note_ids[rec.id] = cast(int, same[0][0])
        skipped["notes"] += 1
        return
    if dup is not None and not dup.corrects:  # (a correction is a note of its own)
        note_ids[rec.id] = dup.id
        skipped["notes"] += 1
        return
    conn.execute(
        "INSERT INTO memories (content, content_key, tags, source, scope, working_dir,"
        " session_id, created_at, updated_at, recall_count, last_recalled_at, archived,"
        " origin, turn_id, batch_id)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (content, key, json.dumps(tags), rec.source, rec.scope, working_dir, session_id,
         rec.created_at, rec.updated_at or rec.created_at, max(0, rec.recall_count),
         rec.last_recalled_at, int(rec.archived),
         _label(rec.origin, "origin") if keep_provenance else "import",
         optional_text(rec.turn_id, "turnId"),
         optional_text(rec.batch_id, "batchId") or (None if session_id else batch)))
    note_ids[rec.id] = conn.last_insert_rowid()
    index_note(conn, note_ids[rec.id], content)
    added["notes"] += 1


def _import_fact(conn: Connection, rec: FactRec, added: dict[str, int],
                 skipped: dict[str, int], keep_provenance: bool = False) -> None:
    key = validate_key(rec.key)
    have = {(v, t) for v, t in conn.execute(
        "SELECT value, valid_from FROM profile_facts WHERE key = ?", (key,))}
    newest_there = max((t for _v, t in have), default=None)
    previous: int | None = None
    for i, version in enumerate(rec.versions):
        value = validate_value(version.value)
        if (value, version.valid_from) in have:
            skipped["factVersions"] += 1
            previous = None
            continue
        now = version.updated_at or version.valid_from
        conn.execute(
            "INSERT INTO profile_facts (key, value, pinned, keywords, valid_from,"
            " superseded_by, supersedes, created_at, updated_at, source, session_id, turn_id,"
            " removed_by, removed_turn_id)"
            " VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?)",
            (key, value, int(version.pinned), json.dumps(version.keywords),
             version.valid_from, previous, version.created_at or version.valid_from, now,
             _label(version.source, "source") if keep_provenance else "import",
             optional_text(version.session_id, "sessionId"),
             optional_text(version.turn_id, "turnId"),
             _label(version.removed_by, "removedBy"),
             _label(version.removed_turn_id, "removedTurnId")))
        new_id = conn.last_insert_rowid()
        conn.execute("UPDATE profile_facts SET superseded_by = id WHERE id = ?", (new_id,))
        if previous is not None:
            conn.execute("UPDATE profile_facts SET superseded_by = ? WHERE id = ?",
                         (new_id, previous))
        previous = new_id
        added["factVersions"] += 1
        last = i == len(rec.versions) - 1
        if last and rec.active and (newest_there is None or version.valid_from > newest_there):
            active = conn.execute("SELECT id FROM profile_facts WHERE key = ? AND"
                                  " superseded_by IS NULL", (key,)).fetchall()
            for (old_id,) in active:
                conn.execute("UPDATE profile_facts SET superseded_by = ? WHERE id = ?",
                             (new_id, old_id))
            conn.execute("UPDATE profile_facts SET superseded_by = NULL, removed_by = NULL,"
                         " removed_turn_id = NULL WHERE id = ?", (new_id,))


def _label(value: object, field: str) -> str | None:
    """A writer's label or turn id from a file: trimmed, at most 120 characters."""
    text = optional_text(value, field)
    return text[:120] if text else None


def _import_link(conn: Connection, rec: LinkRec, note_ids: dict[int, int],
                 added: dict[str, int], skipped: dict[str, int]) -> None:
    a, b = note_ids.get(rec.from_id), note_ids.get(rec.to_id)
    if a is None or b is None or a == b:
        skipped["links"] += 1
        return
    conn.execute("INSERT OR IGNORE INTO memory_links (from_id, to_id, kind, weight,"
                 " created_at, origin) VALUES (?, ?, ?, ?, ?, ?)",
                 (a, b, rec.kind, min(1.0, max(0.0, rec.weight)), rec.created_at or _now(),
                  rec.origin))
    if conn.changes():
        added["links"] += 1
    else:
        skipped["links"] += 1


def _import_lesson(conn: Connection, rec: LessonRec, note_ids: dict[int, int],
                   lesson_ids: dict[int, int], added: dict[str, int],
                   skipped: dict[str, int]) -> None:
    same = cast(list[tuple[int]], conn.execute(
        "SELECT id FROM lessons WHERE activation = ? AND principle = ?",
        (rec.activation, rec.principle)).fetchall())
    if same:
        lesson_ids[rec.id] = same[0][0]
        skipped["lessons"] += 1
        return
    parents = [note_ids[i] for i in rec.parent_ids if i in note_ids]
    conn.execute(
        "INSERT INTO lessons (activation, principle, tags, status, success_count,"
        " failure_count, parent_ids, working_dir, created_at, updated_at, deprecated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (rec.activation, rec.principle, json.dumps(rec.tags), rec.status, rec.success_count,
         rec.failure_count, json.dumps(parents), rec.working_dir, rec.created_at,
         rec.updated_at or rec.created_at, rec.deprecated_at))
    lesson_ids[rec.id] = conn.last_insert_rowid()
    index_distilled(conn, "lessons", lesson_ids[rec.id])
    added["lessons"] += 1


def _import_procedure(conn: Connection, rec: ProcedureRec, note_ids: dict[int, int],
                      lesson_ids: dict[int, int], added: dict[str, int],
                      skipped: dict[str, int]) -> None:
    steps = json.dumps(rec.steps)
    same = conn.execute("SELECT 1 FROM procedures WHERE activation = ? AND steps = ?",
                        (rec.activation, steps)).fetchall()
    if same:
        skipped["procedures"] += 1
        return
    conn.execute(
        "INSERT INTO procedures (activation, steps, tags, status, success_count,"
        " failure_count, use_count, parent_lesson_ids, parent_memory_ids, source,"
        " working_dir, created_at, updated_at, deprecated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (rec.activation, steps, json.dumps(rec.tags), rec.status, rec.success_count,
         rec.failure_count, rec.use_count,
         json.dumps([lesson_ids[i] for i in rec.parent_lesson_ids if i in lesson_ids]),
         json.dumps([note_ids[i] for i in rec.parent_memory_ids if i in note_ids]),
         rec.source, rec.working_dir, rec.created_at, rec.updated_at or rec.created_at,
         rec.deprecated_at))
    index_distilled(conn, "procedures", conn.last_insert_rowid())
    added["procedures"] += 1
