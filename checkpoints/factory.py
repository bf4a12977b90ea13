"""The checkpointer factory: LangGraph's own savers, chosen by a URL or a path.

* a file path or ``sqlite:///path`` -> ``langgraph.checkpoint.sqlite.SqliteSaver`` (WAL mode; the default,
  ``./.switchboard/switchboard.db``) with short channel versions (``checkpoints.sqlite_saver``);
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

__all__ = ["open_checkpointer", "sqlite_connection"]

def sqlite_connection(path: str | Path) -> sqlite3.Connection:
    """A connection usable from LangGraph's worker threads (the saver serialises access with a lock), with a
    30 s busy timeout so two processes on one file wait for each other instead of failing.

    WAL journal with ``synchronous=NORMAL`` (SQLite's documented pairing for WAL): a committed checkpoint survives
    a crash of the process (tests/test_crash_recovery.py kills workers with SIGKILL), not necessarily a power cut
    of the machine, which may lose the last checkpoints (a turn is then re-run from the one before). It spares an
    fsync per checkpoint, which made a handoff cost 2-4x more on a shared disk (bench/handoff_overhead.py). The
    business store (refunds, money) keeps SQLite's FULL default."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(p), check_same_thread=False, timeout=30.0)
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
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
    from checkpoints.sqlite_saver import CompactSqliteSaver

    saver = CompactSqliteSaver(sqlite_connection(text))
    try:
        saver.setup()
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{text} is not a switchboard checkpoint database ({exc})") from exc
    return saver
