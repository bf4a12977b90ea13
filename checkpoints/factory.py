"""The checkpointer factory: LangGraph's own savers, chosen by a URL or a path.

* a file path or ``sqlite:///path`` -> ``langgraph.checkpoint.sqlite.SqliteSaver`` (WAL mode; the default,
  ``./.switchboard/switchboard.db``) with short channel versions and tombstones of deleted threads
  (``checkpoints.sqlite_saver``);
* ``memory`` -> ``InMemorySaver`` (tests);
* ``postgresql://…`` -> ``langgraph.checkpoint.postgres.PostgresSaver`` with tombstones of deleted threads
  (``checkpoints.postgres_saver``) on a ``psycopg_pool.ConnectionPool`` (``langgraph-checkpoint-postgres``, a
  dependency); its tables are created or migrated once, under an advisory
  lock, so several processes starting at once do not race (``switchboard db upgrade`` does it ahead of time).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from checkpoints.business.faults import storage_cause
from graph.contracts.errors import ConfigError, InfrastructureError
from graph.contracts.settings import check_database_target
from graph.contracts.state_values import MSGPACK_ALLOWLIST

__all__ = ["open_checkpointer", "desk_serde", "sqlite_connection", "storage_error_line", "SETUP_LOCK"]

#: Advisory lock key held while LangGraph's checkpoint tables are created or migrated (``PostgresSaver.setup``).
SETUP_LOCK = 0x73626370  # "sbcp"

#: The SQLite checkpoint files this process opened, in order (named by the CLI when a saver fails mid-run).
_OPENED: list[Path] = []


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
    30 s busy timeout so two processes on one file wait for each other instead of failing.

    WAL journal with ``synchronous=NORMAL`` (SQLite's documented pairing for WAL): a committed checkpoint survives
    a crash of the process (tests/nodes/test_crash_recovery.py kills workers with SIGKILL), not necessarily a power cut
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
        raise ConfigError(f"cannot open checkpoint database {p}: {storage_cause(str(exc), p)}") from exc
    _OPENED.append(p)
    return conn


def desk_serde() -> JsonPlusSerializer:
    """LangGraph's serializer for the desk's checkpoints: msgpack, rebuilding LangGraph's safe types (messages, …) and
    the state's models (``graph.contracts.state_values.MSGPACK_ALLOWLIST``) and no other class (another stored object reads as
    its data)."""
    return JsonPlusSerializer(allowed_msgpack_modules=MSGPACK_ALLOWLIST)


def open_checkpointer(target: str | Path | None) -> BaseCheckpointSaver:
    """Open the checkpointer named by ``target`` (see module doc). Raises ConfigError when it cannot be opened."""
    if target is None or str(target) == "memory":
        return InMemorySaver(serde=desk_serde())
    text = check_database_target(str(target))  # mysql://… is refused, never taken as a path
    if text.startswith(("postgres://", "postgresql://", "postgresql+psycopg://")):
        return _postgres_saver(text)
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///"):]
    from checkpoints.sqlite_saver import CompactSqliteSaver

    saver = CompactSqliteSaver(sqlite_connection(text), serde=desk_serde())
    try:
        saver.setup()
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"checkpoint database {text} is unusable: {storage_cause(str(exc), Path(text))}") from exc
    return saver


def _postgres_saver(target: str) -> BaseCheckpointSaver:
    """A PostgresSaver on a connection pool (autocommit, no prepared statements, dict rows: what the saver's
    ``from_conn_string`` uses), its schema set up under :data:`SETUP_LOCK`. Raises ConfigError when the package is
    missing, InfrastructureError when the server cannot be reached."""
    try:
        from psycopg.rows import dict_row

        from checkpoints.postgres_saver import TombstonePostgresSaver
    except ImportError as exc:
        raise ConfigError("Postgres checkpoints need: pip install langgraph-checkpoint-postgres 'psycopg[binary]'") from exc
    import psycopg

    from checkpoints.postgres import advisory_lock, open_pool, redacted

    pool = open_pool(target, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    saver = TombstonePostgresSaver(pool, serde=desk_serde())
    try:
        with advisory_lock(target, SETUP_LOCK, 60.0, "the checkpoint tables are being migrated by another process"):
            saver.setup()
    except psycopg.Error as exc:
        pool.close()
        raise InfrastructureError(f"cannot set up checkpoints in {redacted(target)}: {str(exc).strip()}") from None
    return saver
