"""LangGraph's PostgresSaver with deleted threads that stay deleted (the saver ``checkpoints.open_checkpointer``
opens for a ``postgresql://`` target).

LangGraph's ``delete_thread`` removes a thread's rows but does not stop a run still in flight on it from writing its
next checkpoint, blobs and pending writes afterwards, which brings the thread back with a partial state (a known
LangGraph behaviour: their pull request 7207 adds tombstones to their savers). Here the guarantee lives in
the database, so it holds for every process and every saver writing these tables (Aegra's own saver under
``switchboard serve`` included, which shares them):

* :data:`TOMBSTONES` holds the deleted thread ids (kept for good: a deleted thread id is never reused);
* a trigger on ``checkpoints``, ``checkpoint_blobs`` and ``checkpoint_writes`` (``BEFORE INSERT OR UPDATE``) raises
  ``P0001`` with :data:`DELETED_MARK` for a row of a deleted thread;
* ``delete_thread`` takes the thread's transaction-level advisory lock exclusively, records the tombstone and deletes
  the rows in one transaction, while every guarded write takes the same lock shared first: a write in flight when
  the delete starts commits before it (and is deleted with the rest), a later one waits and then sees the
  tombstone (PL/pgSQL reads with a new snapshot per statement under READ COMMITTED).

The saver turns the trigger's error into :class:`graph.contracts.errors.ThreadDeleted`, so a late run stops at its next step.

Aegra 0.6 deletes a thread (``DELETE /threads/{id}``) by deleting its row in its table ``thread`` only: the
checkpoints stay, and a run in flight on another instance goes on writing them. :func:`install_engine_thread_tombstones`
(``switchboard serve --engine aegra`` runs it after Aegra's migrations) adds a trigger on that table that does what
``delete_thread`` does, in the same transaction as the row's deletion.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from langgraph.checkpoint.postgres import PostgresSaver, _internal

from graph.contracts.errors import ThreadDeleted

__all__ = ["TombstonePostgresSaver", "TOMBSTONES", "DELETED_MARK", "TOMBSTONE_SQL", "ENGINE_THREAD_SQL",
           "is_thread_deleted_error", "install_engine_thread_tombstones"]

#: The table of deleted thread ids.
TOMBSTONES = "checkpoint_deleted_threads"
#: The message of the trigger's error (how it is told from other errors).
DELETED_MARK = "switchboard: thread deleted"
#: The lock key expression of a thread's deletion (shared by writes, exclusive by delete_thread).
_KEY = "hashtextextended('switchboard-deleted-thread:' || {}, 0)"

#: Idempotent DDL of the tombstones (run after LangGraph's own migrations, under the setup lock of
#: ``checkpoints.factory``).
TOMBSTONE_SQL = [
    f"CREATE TABLE IF NOT EXISTS {TOMBSTONES} (thread_id TEXT PRIMARY KEY, deleted_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    f"""CREATE OR REPLACE FUNCTION switchboard_refuse_deleted_thread() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared({_KEY.format("NEW.thread_id")});
    IF EXISTS (SELECT 1 FROM {TOMBSTONES} WHERE thread_id = NEW.thread_id) THEN
        RAISE EXCEPTION '{DELETED_MARK}: %', NEW.thread_id USING ERRCODE = 'P0001';
    END IF;
    RETURN NEW;
END $$""",
    *(f"CREATE OR REPLACE TRIGGER refuse_deleted_thread BEFORE INSERT OR UPDATE ON {table} FOR EACH ROW "
      "EXECUTE FUNCTION switchboard_refuse_deleted_thread()"
      for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")),
]


#: A trigger on Aegra's ``thread`` table: deleting a thread's row records its tombstone and deletes its checkpoints.
ENGINE_THREAD_SQL = [
    f"""CREATE OR REPLACE FUNCTION switchboard_engine_thread_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({_KEY.format("OLD.thread_id")});
    INSERT INTO {TOMBSTONES} (thread_id) VALUES (OLD.thread_id) ON CONFLICT DO NOTHING;
    DELETE FROM checkpoints WHERE thread_id = OLD.thread_id;
    DELETE FROM checkpoint_blobs WHERE thread_id = OLD.thread_id;
    DELETE FROM checkpoint_writes WHERE thread_id = OLD.thread_id;
    RETURN OLD;
END $$""",
    "CREATE OR REPLACE TRIGGER switchboard_thread_deleted AFTER DELETE ON thread FOR EACH ROW "
    "EXECUTE FUNCTION switchboard_engine_thread_deleted()",
]


def install_engine_thread_tombstones(conn: Any) -> bool:
    """Install :data:`ENGINE_THREAD_SQL` on the database of psycopg connection ``conn`` (autocommit) when it has
    Aegra's ``thread`` table and our tombstones (``TombstonePostgresSaver.setup`` ran); True when installed."""
    row = conn.execute(f"SELECT to_regclass('thread') IS NOT NULL AND to_regclass('{TOMBSTONES}') IS NOT NULL").fetchone()
    if not (row and row[0]):
        return False
    for statement in ENGINE_THREAD_SQL:
        conn.execute(statement)
    return True


def is_thread_deleted_error(exc: BaseException) -> bool:
    """Is ``exc`` the trigger's refusal of a write for a deleted thread?"""
    return getattr(exc, "sqlstate", None) == "P0001" and DELETED_MARK in str(exc)


@contextmanager
def _refused_when_deleted(thread_id: Any) -> Iterator[None]:
    import psycopg

    try:
        yield
    except psycopg.Error as exc:
        if not is_thread_deleted_error(exc):
            raise
        raise ThreadDeleted(f"thread {thread_id} was deleted; nothing more is stored for it") from None


class TombstonePostgresSaver(PostgresSaver):
    """PostgresSaver whose ``setup`` also installs the tombstones and whose ``delete_thread`` records one (module doc).

    ``put`` / ``put_writes`` raise :class:`graph.contracts.errors.ThreadDeleted` for a deleted thread."""

    def setup(self) -> None:
        super().setup()
        with self._cursor() as cur:
            for statement in TOMBSTONE_SQL:
                cur.execute(statement)

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        with _refused_when_deleted(config["configurable"].get("thread_id")):
            return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        with _refused_when_deleted(config["configurable"].get("thread_id")):
            super().put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Record the tombstone and delete the thread's rows in one transaction (module doc)."""
        tid = str(thread_id)
        with self.lock, _internal.get_connection(self.conn) as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(f"SELECT pg_advisory_xact_lock({_KEY.format('%s')})", (tid,))
            cur.execute(f"INSERT INTO {TOMBSTONES} (thread_id) VALUES (%s) ON CONFLICT DO NOTHING", (tid,))
            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                cur.execute(f"DELETE FROM {table} WHERE thread_id = %s", (tid,))  # fixed table names

    def is_deleted(self, thread_id: str) -> bool:
        """Was ``thread_id`` deleted?"""
        with self._cursor() as cur:
            cur.execute(f"SELECT 1 FROM {TOMBSTONES} WHERE thread_id = %s", (str(thread_id),))
            return cur.fetchone() is not None
