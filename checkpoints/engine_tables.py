"""What the HTTP engines of ``switchboard serve`` record about threads and runs in their own tables, read where our
stores live (one PostgreSQL database, ``graph.service.serve``), and whether a thread's turn lock is held.

The engines keep a thread status of their own beside the checkpoints: Aegra 0.6 in table ``thread`` (``thread_id``
text, ``status``), LangGraph's runtime ``langgraph-runtime-pg`` 0.11 in table ``threads`` (``thread_id`` uuid,
``status``); both use ``idle`` / ``busy`` / ``interrupted`` / ``error``. Aegra refuses every resume of a thread whose
status is not ``interrupted`` ("Cannot resume: thread is not in interrupted state"), whatever its checkpoint says, so
``switchboard tasks --stuck`` reads it (:func:`engine_thread_status`). Aegra also records each run (table ``runs``:
``status``, ``error_message``, the merged ``config``) and its stream events (table ``run_events``, where a failed
run's ``error`` event names the exception's class); ``graph.service.aegra_app`` reads them to answer a failed ``/runs/wait``
with an HTTP error instead of Aegra's ``200 {}`` (:func:`aegra_run_failure`), and the owner of a thread id
(:func:`aegra_thread_user`) to answer a duplicate thread id with 409.

Every function reads only (no engine table is written here), takes the ``postgresql://`` URL of that database, and
answers None / False when the table does not exist (another engine, or a database the engine never migrated).
Blocking (psycopg): async callers run them in a thread. Driver failures become
:class:`graph.contracts.errors.InfrastructureError`.
"""

from __future__ import annotations

import functools
from typing import Any

from graph.contracts.errors import InfrastructureError

__all__ = ["engine_thread_status", "aegra_thread_user", "aegra_run_failure", "engine_runs_in_flight",
           "thread_lock_held"]


@functools.lru_cache(maxsize=4)
def _pool(db: str) -> Any:
    from checkpoints.postgres import open_pool

    # a few connections are enough: one short query per request of the run guard or per task of tasks --stuck
    return open_pool(db, max_size=4, autocommit=True)


def _query(db: str, sql: str, params: tuple) -> Any:
    """The first row of ``sql`` (a tuple) or None; None too when a table it reads does not exist."""
    import psycopg

    try:
        with _pool(db).connection() as conn:
            return conn.execute(sql, params).fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    except psycopg.Error as exc:
        from checkpoints.postgres import redacted

        raise InfrastructureError(f"PostgreSQL at {redacted(db)} failed: {str(exc).strip()}") from None


def engine_thread_status(db: str, thread_id: str) -> str | None:
    """The engine's status of ``thread_id`` (``idle`` | ``busy`` | ``interrupted`` | ``error``): Aegra's table
    ``thread``, else langgraph-runtime-pg's ``threads``; None when neither holds the thread."""
    row = _query(db, "SELECT status FROM thread WHERE thread_id = %s", (thread_id,))
    if row is None:
        row = _query(db, "SELECT status FROM threads WHERE thread_id::text = %s", (thread_id,))
    return str(row[0]) if row is not None else None


def aegra_thread_user(db: str, thread_id: str) -> str | None:
    """The Aegra user (``identity``, e.g. ``customer:c_ada``) who created thread ``thread_id``, or None."""
    row = _query(db, "SELECT user_id FROM thread WHERE thread_id = %s", (thread_id,))
    return str(row[0]) if row is not None else None


def aegra_run_failure(db: str, thread_id: str, tag_key: str, tag: str) -> tuple[str, str] | None:
    """``(exception class name, message)`` of the failed Aegra run on ``thread_id`` whose config metadata carries
    ``tag_key = tag``, or None when that run did not fail (or is not found). The class name comes from the run's
    stored ``error`` event ("Exception" when it has none)."""
    row = _query(db, "SELECT run_id, status, error_message FROM runs WHERE thread_id = %s AND "
                     "config -> 'metadata' ->> %s = %s ORDER BY created_at DESC LIMIT 1", (thread_id, tag_key, tag))
    if row is None or row[1] != "error":
        return None
    event = _query(db, "SELECT data ->> 'error' FROM run_events WHERE run_id = %s AND event = 'error' "
                       "ORDER BY seq DESC LIMIT 1", (row[0],))
    return (str(event[0]) if event is not None and event[0] else "Exception"), str(row[2] or "")


def engine_runs_in_flight(db: str, thread_id: str) -> bool:
    """Does the engine hold a run of ``thread_id`` that is pending or running (Aegra's or langgraph-runtime-pg's table
    ``runs``, both with ``thread_id`` and ``status``)? False when neither table exists."""
    row = _query(db, "SELECT EXISTS (SELECT 1 FROM runs WHERE thread_id::text = %s AND status IN ('pending', "
                     "'running'))", (thread_id,))
    return bool(row and row[0])


def thread_lock_held(db: str, thread_id: str) -> bool:
    """Is the turn lock of ``thread_id`` (the advisory lock of ``checkpoints.locks`` and
    ``nodes.thread_guard.ThreadRunGuard``) held by any session now? Read from ``pg_locks`` without taking the lock, so
    the probe never makes a run that starts at the same moment find its thread busy."""
    from checkpoints.postgres import advisory_key

    key = advisory_key("switchboard-thread", thread_id) & 0xFFFFFFFFFFFFFFFF
    # a bigint advisory key shows in pg_locks as classid = high 32 bits, objid = low 32 bits, objsubid = 1
    row = _query(db, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
                     "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                     "AND classid::bigint = %s AND objid::bigint = %s)", (key >> 32, key & 0xFFFFFFFF))
    return bool(row and row[0])
