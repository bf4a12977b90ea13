"""The checkpointer factory: LangGraph's own savers, chosen by a URL or a path.

* a file path or ``sqlite:///path`` -> ``langgraph.checkpoint.sqlite.SqliteSaver`` (WAL mode; the default,
  ``./.switchboard/switchboard.db``);
* ``memory`` -> ``InMemorySaver`` (tests);
* ``postgresql://…`` -> ``langgraph.checkpoint.postgres.PostgresSaver`` when ``langgraph-checkpoint-postgres``
  is installed (``pip install langgraph-checkpoint-postgres "psycopg[binary]"``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from graph.errors import ConfigError

__all__ = ["open_checkpointer", "thread_ids", "thread_bytes", "sqlite_connection"]


def sqlite_connection(path: str | Path) -> sqlite3.Connection:
    """A connection usable from LangGraph's worker threads (the saver serialises access with a lock), with a
    30 s busy timeout so two processes on one file wait for each other instead of failing."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(p), check_same_thread=False, timeout=30.0)
        conn.execute("PRAGMA busy_timeout=30000")
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(f"cannot open checkpoint database {p}: {exc}") from exc
    return conn


def open_checkpointer(target: str | Path | None) -> BaseCheckpointSaver:
    """Open the checkpointer named by ``target`` (see module doc). Raises ConfigError when it cannot be opened."""
    if target is None or str(target) == "memory":
        return InMemorySaver()
    text = str(target)
    if text.startswith(("postgres://", "postgresql://")):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver  # type: ignore[import-not-found]
        except ImportError as exc:
            raise ConfigError("Postgres checkpoints need: pip install langgraph-checkpoint-postgres 'psycopg[binary]'") from exc
        import psycopg  # type: ignore[import-not-found]

        conn = psycopg.connect(text, autocommit=True, prepare_threshold=0)
        saver = PostgresSaver(conn)
        saver.setup()
        return saver
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///"):]
    from langgraph.checkpoint.sqlite import SqliteSaver

    saver = SqliteSaver(sqlite_connection(text))
    try:
        saver.setup()
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{text} is not a switchboard checkpoint database ({exc})") from exc
    return saver


def thread_ids(saver: BaseCheckpointSaver) -> list[str]:
    """Thread ids stored in ``saver``, most recently updated first."""
    conn = getattr(saver, "conn", None)
    if isinstance(conn, sqlite3.Connection):
        rows = conn.execute(
            "SELECT thread_id, MAX(checkpoint_id) AS last FROM checkpoints WHERE checkpoint_ns = '' "
            "GROUP BY thread_id ORDER BY last DESC").fetchall()
        return [r[0] for r in rows]
    seen: dict[str, str] = {}
    for cp in saver.list(None):
        tid = cp.config["configurable"]["thread_id"]
        seen.setdefault(tid, cp.checkpoint["id"])
    return sorted(seen, key=lambda t: seen[t], reverse=True)


def thread_bytes(saver: BaseCheckpointSaver, thread_id: str) -> int:
    """Bytes stored for one thread by a SQLite saver (checkpoint blobs + metadata + pending writes)."""
    conn = getattr(saver, "conn", None)
    if not isinstance(conn, sqlite3.Connection):
        raise ConfigError("thread_bytes needs a SQLite checkpointer")
    a = conn.execute("SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints WHERE thread_id = ?",
                     (thread_id,)).fetchone()[0]
    b = conn.execute("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?", (thread_id,)).fetchone()[0]
    return int(a) + int(b)
