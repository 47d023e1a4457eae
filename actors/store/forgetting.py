"""Forgetting by conversation, on the memory side: match and delete.

The reflection actor decides *what* the user asked to forget (``actors.policy.forget``)
and sends it inside :class:`~actors.memory.messages.ApplyReflection` as a
:class:`~actors.memory.messages.ForgetIn`; this module finds and removes it, inside the
same write transaction as the rest of the reflection:

* ``retire_keys`` — the active fact is retired (history kept: the fact stopped being
  true, like a supersede without a new value);
* ``purge_keys`` — every version of the fact is deleted (the user asked to forget it);
* ``targets`` — word lists: every fact version a target names — by its value, or by its
  key or a key of the same meaning (:func:`actors.policy.forget.names_fact`: "where I
  work" names ``job`` and ``employer``) — is deleted with its whole key history; every
  note (active or archived) a target names (:func:`actors.policy.forget.names_note`) is
  rewritten without it when it holds other facts too (:func:`actors.policy.forget.
  without`: "The user said: I live in Graz and I work at a brewery." less "work" keeps
  "… I live in Graz."; its vector is dropped, so the backfill embeds the new text), or
  else deleted: the note's FTS row, vectors and links go with it (trigger and ``ON
  DELETE CASCADE``), and a vector the backfill computed for it before cannot be written
  back afterwards (the foreign key refuses it and ``VectorStore.put`` skips it). The
  active facts the same turn wrote beside such a note (its provenance: session and turn)
  go too when a word of theirs shares its first five letters with what was removed of
  the note: "forget what I said about my stamps" deletes the note "The user collects
  stamps." and ``hobby_collection=true`` written from that sentence, not ``city=Graz``
  from the same message.

Nothing else is touched: an entry must be named by a target, or be such a fact.
"""

from __future__ import annotations

from typing import cast

import msgspec

from actors.policy.forget import WORD_RE, matches, names_fact, names_note, target_words, without

from .cold import drop_derived
from .fts import content_key
from .recall import index_note
from .sql import Connection

__all__ = ["WORD_RE", "Forgotten", "apply_forget", "matches", "restates"]


def _distinctive(text: str) -> set[str]:
    return {w.lower().replace("’", "'").removesuffix("'s")
            for w in WORD_RE.findall(text.replace("_", " ")) if len(w) >= 3 or w.isdigit()}


def restates(item: str, forgotten: list[str]) -> bool:
    """Whether ``item`` (a note, or a fact as ``"key value"``) restates one of the
    ``forgotten`` texts: it holds at least half of that text's words of 3+ letters or
    digits, and at least two of them (or its only one). So after "forget
    my address" deleted "Lives at 12 Rue Victor Hugo, Lyon", the same turn's reflection
    must not store "User asked to forget their address, 12 Rue Victor Hugo"."""
    have = _distinctive(item)
    for text in forgotten:
        words = _distinctive(text)
        if not words:
            continue
        shared = len(words & have)
        if shared >= max(min(2, len(words)), (len(words) + 1) // 2):
            return True
    return False


class Forgotten(msgspec.Struct):
    """What :func:`apply_forget` removed: keys retired (history kept), keys whose every
    version was deleted, ids of deleted notes, and ids of notes rewritten without what
    was forgotten (their other facts kept)."""

    retired_keys: list[str] = msgspec.field(default_factory=list)
    purged_keys: list[str] = msgspec.field(default_factory=list)
    note_ids: list[int] = msgspec.field(default_factory=list)
    rewritten_note_ids: list[int] = msgspec.field(default_factory=list)


def _like(word: str) -> str:
    return "%" + word.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


_STEM_STOP = frozenset("""the user users user's and that this with from have has was were
their they them about into also very just like likes big for are not but you true yes
all any one two new old""".split())


def _stems(text: str) -> set[str]:
    return {w.lower()[:5] for w in WORD_RE.findall(text.replace("_", " "))
            if len(w) >= 3 and w.lower() not in _STEM_STOP}


def _same_turn_facts(conn: Connection, note_id: int, content: str) -> list[str]:
    """Keys of the active facts written by the same turn as the forgotten note (its
    provenance: session and turn) that speak of the same thing — a key or value word
    shares its first five letters with the note's words ("hobby_collection=true" beside
    "The user collects stamps"). Another fact of that turn ("city=Graz") stays."""
    row = conn.execute("SELECT session_id, turn_id FROM memories WHERE id = ?",
                       (note_id,)).fetchall()
    if not row or row[0][0] is None or row[0][1] is None:
        return []
    stems = _stems(content)
    facts = cast(list[tuple[str, str]], conn.execute(
        "SELECT key, value FROM profile_facts WHERE superseded_by IS NULL AND session_id = ? "
        "AND turn_id = ?", row[0]).fetchall())
    return [key for key, value in facts if _stems(f"{key} {value}") & stems]


def _as_written(words: list[str], content: str) -> list[str]:
    """A purged value's ``words`` as ``content`` writes them: a word the note does not
    hold is replaced by the note's word with the same first five letters ("bridge
    designer" in "I design bridges" is ``bridge``, ``design``)."""
    have = [w.lower() for w in WORD_RE.findall(content)]
    out = []
    for w in words:
        if not matches([w], content) and len(w) >= 5:
            w = next((h for h in have if len(h) >= 5 and h[:5] == w[:5]), w)
        out.append(w)
    return out


def apply_forget(conn: Connection, *, retire_keys: list[str], purge_keys: list[str],
                 targets: list[list[str]], now_ms: int, by: str | None = None,
                 turn_id: str | None = None) -> Forgotten:
    """Retire, purge and delete as described in the module doc. Must run inside the
    caller's write transaction (it issues plain statements). ``by`` / ``turn_id``: who
    forgets and in which turn, kept on a retired version (``removed_by``,
    ``removed_turn_id``). Returns :class:`Forgotten`.
    """
    out = Forgotten()
    for key in retire_keys:
        conn.execute("UPDATE profile_facts SET superseded_by = id, updated_at = ?, "
                     "removed_by = ?, removed_turn_id = ? "
                     "WHERE key = ? AND superseded_by IS NULL", (now_ms, by, turn_id, key))
        if conn.changes():
            out.retired_keys.append(key)
    purge = list(dict.fromkeys(purge_keys))
    for words in targets:
        if not words:
            continue
        # Every version is read: a target names a fact by its value or by a word of
        # its key's meaning ("where I work" names ``job``), which no LIKE can find.
        rows = cast(list[tuple[str, str]], conn.execute(
            "SELECT DISTINCT key, value FROM profile_facts").fetchall())
        for key, value in rows:
            if names_fact(words, key, value) and key not in purge:
                purge.append(key)
    note_targets = [list(t) for t in targets]
    loose: list[list[str]] = []  # a purged fact's value: the note may word it otherwise
    for key in purge:
        # what the fact said goes from the notes that quoted it too ("what I told you
        # about my job" purges job = bridge designer; "I design bridges" leaves the note)
        values = cast(list[tuple[str]], conn.execute(
            "SELECT DISTINCT value FROM profile_facts WHERE key = ?", (key,)).fetchall())
        conn.execute("DELETE FROM profile_facts WHERE key = ?", (key,))
        if conn.changes():
            out.purged_keys.append(key)
            if key in out.retired_keys:
                out.retired_keys.remove(key)
            for (value,) in values:
                words = [w for w in target_words(value) if len(w) >= 3]
                if words and words not in note_targets:
                    note_targets.append(words)
                    loose.append(words)
    for target in note_targets:
        if not target:
            continue
        stems = target in loose
        # a note a target names holds most of its words: one of them, at least
        id_rows = cast(list[tuple[int, str]], conn.execute(
            "SELECT id, content FROM memories WHERE " + " OR ".join(
                ["lower(content) LIKE ? ESCAPE '\\'"] * len(target)),
            [_like(w[:5] if stems else w.rstrip("s")) for w in target]).fetchall())
        for note_id, content in id_rows:
            words = _as_written(target, content) if stems else target
            if note_id not in out.note_ids and names_note(words, content):
                rest = without(content, words, lists=not stems)
                if rest is not None:  # its other facts stay, in the same words
                    kept = {w.lower() for w in WORD_RE.findall(rest)}
                    gone = " ".join(w for w in WORD_RE.findall(content) if w.lower() not in kept)
                    for key in _same_turn_facts(conn, note_id, gone):
                        conn.execute("DELETE FROM profile_facts WHERE key = ?", (key,))
                        if conn.changes() and key not in out.purged_keys:
                            out.purged_keys.append(key)
                    conn.execute("UPDATE memories SET content = ?, content_key = ?, "
                                 "updated_at = ? WHERE id = ?",
                                 (rest, content_key(rest), now_ms, note_id))
                    index_note(conn, note_id, rest)
                    # its vector said what is forgotten: the backfill embeds it anew
                    conn.execute("DELETE FROM memory_vectors WHERE note_id = ?", (note_id,))
                    out.rewritten_note_ids.append(note_id)
                    continue
                for key in _same_turn_facts(conn, note_id, content):
                    conn.execute("DELETE FROM profile_facts WHERE key = ?", (key,))
                    if conn.changes() and key not in out.purged_keys:
                        out.purged_keys.append(key)
                        if key in out.retired_keys:
                            out.retired_keys.remove(key)
                conn.execute("DELETE FROM memories WHERE id = ?", (note_id,))
                out.note_ids.append(note_id)
    # A lesson or procedure distilled from a forgotten note is forgotten with it.
    drop_derived(conn, out.note_ids)
    return out
