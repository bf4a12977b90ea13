"""Connections to the business database: one SQLAlchemy ``Engine`` per database URL and process.

Targets (:func:`resolve_url`): a file path or ``sqlite:///path`` (SQLite, the default
``$SWITCHBOARD_HOME/business.db``), or ``postgresql://…`` / ``postgres://…`` / ``postgresql+psycopg://…``
(PostgreSQL through psycopg 3).

Concurrency settings (SQLite; SQLAlchemy's documented pysqlite recipe, "Enabling Non-Legacy SQLite
Transactional Modes"): the driver's own BEGIN handling is switched off and SQLAlchemy's ``begin`` event emits
``BEGIN IMMEDIATE`` for a write transaction (the connection carries the execution option
:data:`WRITE`) and a plain deferred ``BEGIN`` for a read, so read-modify-write transactions of two threads or
processes on one file take the write lock up front and run one after the other; WAL journal (readers do not
block the writer), ``busy_timeout`` :data:`BUSY_TIMEOUT_MS`, foreign keys on. PostgreSQL runs at READ
COMMITTED; the repository takes row locks (``SELECT … FOR UPDATE``) and uses ``INSERT … ON CONFLICT DO NOTHING``
where two writers could race, and pooled connections are pinged before use (a restarted server is survived).

Every driver error that reaches a caller is converted by :func:`storage_errors`: infrastructure faults become
:class:`~checkpoints.business.records.StorageUnavailable` (one line naming the database and the cause), a
broken constraint a :class:`~checkpoints.business.records.StoreError`.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Engine, make_url

from checkpoints.business.faults import storage_cause
from checkpoints.business.records import StorageUnavailable, StoreError
from graph.contracts.errors import ConfigError

__all__ = ["BUSY_TIMEOUT_MS", "WRITE", "default_store_path", "resolve_url", "engine_for", "describe",
           "sqlite_path", "storage_errors", "dispose"]

#: How long a SQLite connection waits for another writer's lock before giving up (ms). Source: the first
#: release's value; a write transaction of this store lasts milliseconds.
BUSY_TIMEOUT_MS = 10_000
#: Execution option marking a connection whose transaction writes (SQLite: ``BEGIN IMMEDIATE``).
WRITE = "switchboard_write"

_ENGINES: weakref.WeakValueDictionary[tuple[int, str], Engine] = weakref.WeakValueDictionary()
_LOCK = threading.Lock()


def default_store_path() -> Path:
    """``$SWITCHBOARD_HOME/business.db``; ``SWITCHBOARD_HOME`` defaults to ``./.switchboard``."""
    return Path(os.environ.get("SWITCHBOARD_HOME") or ".switchboard") / "business.db"


def resolve_url(target: str | Path | URL | None) -> URL:
    """The SQLAlchemy URL of ``target``: None -> :func:`default_store_path`; a path or ``sqlite:///path`` ->
    ``sqlite:///<absolute path>``; ``postgresql://``, ``postgres://`` or ``postgresql+psycopg://`` ->
    ``postgresql+psycopg://…``. Raises ``ValueError`` for ``":memory:"`` (every call opens its own connection, so
    an in-memory database would vanish between calls) and :class:`~graph.contracts.errors.ConfigError` for another
    scheme or a malformed URL."""
    if isinstance(target, URL):
        text = target.render_as_string(hide_password=False)
    else:
        text = str(target if target is not None else default_store_path())
    if text in (":memory:", "sqlite://", "sqlite:///:memory:"):
        raise ValueError("the business store needs a file or a server, not an in-memory database")
    if "://" not in text:
        return URL.create("sqlite", database=str(Path(text).expanduser().absolute()))
    try:
        url = make_url(text)
    except sa_exc.ArgumentError as exc:
        raise ConfigError(f"not a database URL: {_redact(text)} ({exc})") from None
    backend = url.get_backend_name()
    if backend == "sqlite" and url.get_driver_name() in ("", "pysqlite"):
        if not url.database or url.database == ":memory:":
            raise ValueError("the business store needs a file or a server, not an in-memory database")
        return URL.create("sqlite", database=str(Path(url.database).expanduser().absolute()))
    if backend in ("postgresql", "postgres") and url.get_driver_name() in ("", "psycopg", "psycopg2"):
        return url.set(drivername="postgresql+psycopg")
    raise ConfigError(f"unsupported business database {_redact(text)}: use a file path, sqlite:///path or "
                      "postgresql://user@host/db")


def _redact(text: str) -> str:
    try:
        return make_url(text).render_as_string(hide_password=True)
    except sa_exc.ArgumentError:
        return text.split("@")[-1]


def describe(url: URL) -> str:
    """How messages name the database: the file path for SQLite, the URL without its password otherwise."""
    if url.get_backend_name() == "sqlite":
        return str(url.database)
    return url.set(drivername=url.get_backend_name()).render_as_string(hide_password=True)


def sqlite_path(url: URL) -> Path | None:
    """The database file of a SQLite URL, else None."""
    return Path(url.database) if url.get_backend_name() == "sqlite" and url.database else None


def engine_for(url: URL) -> Engine:
    """The process's ``Engine`` for ``url`` (created on first use and cached while any store holds it; a child
    process made by fork gets its own). Creating it opens no connection; for SQLite it creates the parent
    directory of the file. Raises :class:`StorageUnavailable` when that directory cannot be created."""
    key = (os.getpid(), url.render_as_string(hide_password=False))
    with _LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _create(url)
            _ENGINES[key] = engine
        return engine


def dispose(url: URL) -> None:
    """Close the pooled connections of this process's engine for ``url`` (if any): before dropping a database,
    or to let a file be deleted. The engine stays usable and reconnects on demand."""
    engine = _ENGINES.get((os.getpid(), url.render_as_string(hide_password=False)))
    if engine is not None:
        engine.dispose()


def _create(url: URL) -> Engine:
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    path = sqlite_path(url)
    assert path is not None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageUnavailable(f"business database {path} is unavailable: cannot create {path.parent} "
                                 f"({exc.strerror or exc})") from None
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy's "begin" hook below emits BEGIN itself
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys = ON")
            mode = cursor.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        finally:
            cursor.close()
        if str(mode).lower() != "wal":  # pragma: no cover - e.g. a network filesystem
            raise StorageUnavailable(f"business database {path} is unavailable: cannot use WAL journal mode "
                                     f"(got {mode!r})")

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        write = connection.get_execution_options().get(WRITE)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _cause(error: BaseException, url: URL | None = None) -> str:
    original = getattr(error, "orig", None) or error
    lines = [line.strip() for line in str(original).splitlines() if line.strip()]
    text = lines[0] if lines else type(original).__name__
    return storage_cause(text, sqlite_path(url)) if url is not None else text


@contextmanager
def storage_errors(url: URL) -> Iterator[None]:
    """Convert driver errors raised inside the block: a broken constraint -> :class:`StoreError`; any other
    database error (unreachable, locked, corrupt, read-only, disk full, pool exhausted) ->
    :class:`StorageUnavailable`. Messages are one line naming the database (:func:`describe`)."""
    try:
        yield
    except sa_exc.IntegrityError as exc:
        raise StoreError(f"business database {describe(url)} refused a write: {_cause(exc)}") from exc
    except (sa_exc.DBAPIError, sa_exc.TimeoutError) as exc:
        raise StorageUnavailable(f"business database {describe(url)} is unavailable: {_cause(exc, url)}") from exc
    except OSError as exc:
        cause = storage_cause(str(exc.strerror or exc), sqlite_path(url))
        raise StorageUnavailable(f"business database {describe(url)} is unavailable: {cause}") from exc
