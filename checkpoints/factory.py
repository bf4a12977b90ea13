"""The checkpointer factory: LangGraph's own savers, chosen by a URL or a path.

* a file path or ``sqlite:///path`` -> ``langgraph.checkpoint.sqlite.SqliteSaver`` (WAL mode; the default,
  ``./.switchboard/switchboard.db``);
* ``memory`` -> ``InMemorySaver`` (tests);
* ``postgresql://…`` -> ``langgraph.checkpoint.postgres.PostgresSaver`` on a ``psycopg_pool.ConnectionPool``
  (``langgraph-checkpoint-postgres``, a dependency); its tables are created or migrated once, under an advisory
  lock, so several processes starting at once do not race (``switchboard db upgrade`` does it ahead of time).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from graph.errors import ConfigError, InfrastructureError

__all__ = ["open_checkpointer", "sqlite_connection", "SETUP_LOCK"]

#: Advisory lock key held while LangGraph's checkpoint tables are created or migrated (``PostgresSaver.setup``).
SETUP_LOCK = 0x73626370  # "sbcp"


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
    if text.startswith(("postgres://", "postgresql://", "postgresql+psycopg://")):
        return _postgres_saver(text)
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///"):]
    from langgraph.checkpoint.sqlite import SqliteSaver

    saver = SqliteSaver(sqlite_connection(text))
    try:
        saver.setup()
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{text} is not a switchboard checkpoint database ({exc})") from exc
    return saver


def _postgres_saver(target: str) -> BaseCheckpointSaver:
    """A PostgresSaver on a connection pool (autocommit, no prepared statements, dict rows: what the saver's
    ``from_conn_string`` uses), its schema set up under :data:`SETUP_LOCK`. Raises ConfigError when the package is
    missing, InfrastructureError when the server cannot be reached."""
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
    except ImportError as exc:
        raise ConfigError("Postgres checkpoints need: pip install langgraph-checkpoint-postgres 'psycopg[binary]'") from exc
    import psycopg

    from checkpoints.postgres import advisory_lock, open_pool, redacted

    pool = open_pool(target, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    saver = PostgresSaver(pool)
    try:
        with advisory_lock(target, SETUP_LOCK, 60.0, "the checkpoint tables are being migrated by another process"):
            saver.setup()
    except psycopg.Error as exc:
        pool.close()
        raise InfrastructureError(f"cannot set up checkpoints in {redacted(target)}: {str(exc).strip()}") from None
    return saver
