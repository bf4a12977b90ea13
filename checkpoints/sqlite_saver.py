"""LangGraph's SqliteSaver with short channel versions (the documented ``get_next_version`` hook) and deleted
threads that stay deleted.

Deleted threads: LangGraph's ``delete_thread`` removes a thread's rows but does not stop a run that is still in flight
on it (another thread or process, holding a config from before the delete) from writing its next checkpoint and
pending writes, which brings the thread back with a partial state (a known LangGraph behaviour: their pull request
7207 adds tombstones to their savers). Here ``delete_thread`` records a tombstone in
:data:`TOMBSTONES` in the same transaction as the deletes, and triggers on ``checkpoints`` and ``writes`` abort any
later insert for that thread inside the database, whichever process or connection writes it. The saver turns the
abort into :class:`graph.errors.ThreadDeleted`, so the late run stops at its next step (it does not go on to make a
refund on a thread nobody can see). A deleted thread id is never reused: a new conversation on it is refused too.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver

from graph.errors import ThreadDeleted

__all__ = ["CompactSqliteSaver", "compact_next_version", "VERSION_DIGITS", "TOMBSTONES", "DELETED_MARK"]

#: Digits of a channel version written by our SQLite saver (10**8 steps of one thread before the width grows).
VERSION_DIGITS = 8
#: The table of deleted thread ids (one row per thread, kept for good).
TOMBSTONES = "checkpoint_deleted_threads"
#: The message of the triggers' abort (how the saver tells it from other constraint errors).
DELETED_MARK = "switchboard: thread deleted"

_TOMBSTONE_SQL = f"""
CREATE TABLE IF NOT EXISTS {TOMBSTONES} (
    thread_id TEXT PRIMARY KEY,
    deleted_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
CREATE TRIGGER IF NOT EXISTS refuse_deleted_thread_checkpoints BEFORE INSERT ON checkpoints
WHEN EXISTS (SELECT 1 FROM {TOMBSTONES} WHERE thread_id = NEW.thread_id)
BEGIN SELECT RAISE(ABORT, '{DELETED_MARK}'); END;
CREATE TRIGGER IF NOT EXISTS refuse_deleted_thread_writes BEFORE INSERT ON writes
WHEN EXISTS (SELECT 1 FROM {TOMBSTONES} WHERE thread_id = NEW.thread_id)
BEGIN SELECT RAISE(ABORT, '{DELETED_MARK}'); END;
"""


def compact_next_version(current: str | int | float | None, channel: None = None) -> str:
    """The channel version after ``current``: the step counter, zero-padded to ``VERSION_DIGITS`` digits (``"00000043"``).

    LangGraph's SqliteSaver writes ``f"{n:032}.{random:016}"`` (50 characters), and every checkpoint stores one
    version per channel and per node that saw it: about 2 kB of a 3 kB checkpoint, a third of a thread's bytes
    (bench/storage.py). ``BaseCheckpointSaver.get_next_version`` documents that a saver may use any increasing
    ``str``/``int``/``float`` versions; these stay strings, so a thread written with the long form goes on
    comparing correctly: its counter (the part before the ".") is carried on, and an 8-digit string is greater than
    any 32-digit-padded one below 10**24. The random suffix keeps versions of forked branches apart where blobs are
    stored per version (PostgreSQL); SQLite stores each checkpoint whole, so it is not needed there."""
    n = 0 if current is None else int(str(current).split(".")[0])
    return f"{n + 1:0{VERSION_DIGITS}d}"


@contextmanager
def _refused_when_deleted(thread_id: Any) -> Iterator[None]:
    """Turn the triggers' abort into ThreadDeleted (other database errors pass unchanged)."""
    try:
        yield
    except sqlite3.IntegrityError as exc:
        if DELETED_MARK not in str(exc):
            raise
        raise ThreadDeleted(f"thread {thread_id} was deleted; nothing more is stored for it") from None


class CompactSqliteSaver(SqliteSaver):
    """LangGraph's SqliteSaver with :func:`compact_next_version` versions and tombstones of deleted threads (module
    doc); opened by ``checkpoints.open_checkpointer``.

    ``put`` / ``put_writes`` raise :class:`graph.errors.ThreadDeleted` for a thread that ``delete_thread`` deleted."""

    def setup(self) -> None:
        if self.is_setup:
            return
        super().setup()
        try:
            self.conn.executescript(_TOMBSTONE_SQL)
        except sqlite3.OperationalError as exc:
            if "readonly database" not in str(exc):  # a read-only file is read, never written
                raise

    def get_next_version(self, current: Any, channel: None = None) -> str:  # type: ignore[override]
        return compact_next_version(current, channel)

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        with _refused_when_deleted(config["configurable"].get("thread_id")):
            return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        with _refused_when_deleted(config["configurable"].get("thread_id")):
            super().put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints and writes and record its tombstone, in one transaction (a run writing
        concurrently waits for SQLite's write lock and is refused after it)."""
        with self.cursor() as cur:
            cur.execute(f"INSERT OR IGNORE INTO {TOMBSTONES} (thread_id) VALUES (?)", (str(thread_id),))
            cur.execute("DELETE FROM checkpoints WHERE thread_id = ?", (str(thread_id),))
            cur.execute("DELETE FROM writes WHERE thread_id = ?", (str(thread_id),))

    def is_deleted(self, thread_id: str) -> bool:
        """Was ``thread_id`` deleted?"""
        with self.cursor(transaction=False) as cur:
            cur.execute(f"SELECT 1 FROM {TOMBSTONES} WHERE thread_id = ?", (str(thread_id),))
            return cur.fetchone() is not None
