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

from checkpoints.business.faults import storage_cause
from graph.errors import ConfigError

__all__ = ["open_checkpointer", "sqlite_connection", "opened_files", "storage_error_line"]

#: The SQLite checkpoint files this process opened, in order (named by the CLI when a saver fails mid-run).
_OPENED: list[Path] = []


def opened_files() -> tuple[Path, ...]:
    """The SQLite checkpoint files opened by :func:`sqlite_connection` in this process, oldest first."""
    return tuple(_OPENED)


def storage_error_line(exc: BaseException) -> str | None:
    """``"checkpoint database <file> failed: <cause>"`` for a driver error that escaped a saver mid-run (sqlite3,
    psycopg, SQLAlchemy), naming the last checkpoint file this process opened; None for any other exception."""
    module = type(exc).__module__ or ""
    if not (isinstance(exc, sqlite3.Error) or module.startswith(("psycopg", "sqlalchemy"))):
        return None
    where = _OPENED[-1] if _OPENED else None
    cause = storage_cause(str(getattr(exc, "orig", None) or exc), where)
    return f"checkpoint database {where if where is not None else '(server)'} failed: {cause}"


def sqlite_connection(path: str | Path) -> sqlite3.Connection:
    """A connection usable from LangGraph's worker threads (the saver serialises access with a lock), with a
    30 s busy timeout so two processes on one file wait for each other instead of failing."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(p), check_same_thread=False, timeout=30.0)
        conn.execute("PRAGMA busy_timeout=30000")
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(f"cannot open checkpoint database {p}: {storage_cause(str(exc), p)}") from exc
    _OPENED.append(p)
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

        try:
            conn = psycopg.connect(text, autocommit=True, prepare_threshold=0)
            saver = PostgresSaver(conn)
            saver.setup()
        except psycopg.Error as exc:  # unreachable server, bad credentials, missing database: one line, no password
            from sqlalchemy.engine import make_url

            where = make_url(text).render_as_string(hide_password=True)
            raise ConfigError(f"checkpoint database {where} is unavailable: {storage_cause(str(exc))}") from None
        return saver
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///"):]
    from langgraph.checkpoint.sqlite import SqliteSaver

    saver = SqliteSaver(sqlite_connection(text))
    try:
        saver.setup()
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"checkpoint database {text} is unusable: {storage_cause(str(exc), Path(text))}") from exc
    return saver
