"""PostgreSQL plumbing shared by our stores: the libpq form of a URL, connection pools, advisory locks.

* :func:`libpq_url` turns what ``--db`` / ``SWITCHBOARD_DB`` accept (``postgres://``, ``postgresql://``,
  ``postgresql+psycopg://``) into the URL psycopg and libpq read.
* :func:`open_pool` opens a ``psycopg_pool.ConnectionPool`` (the pool LangGraph's ``PostgresSaver`` documents);
  connections are checked before they are lent, so a restarted server is survived.
* :func:`advisory_lock` holds a session-level advisory lock (``pg_try_advisory_lock``, polled) on a connection of
  its own: another process or machine asking for the same key waits. The server releases it when that
  connection ends, so a process killed with SIGKILL never leaves a thread locked.

Driver failures become :class:`graph.contracts.errors.InfrastructureError` with one line naming the server (no password).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from graph.contracts.errors import InfrastructureError, InputError

__all__ = ["POOL_MAX_SIZE", "SETUP_KEY_ENGINE", "libpq_url", "redacted", "open_pool", "advisory_key", "advisory_lock"]

#: Connections one pool may open (per process and database). Source: LangGraph's server runs a handful of runs at
#: once per worker; 10 keeps 2 instances × 2 stores well under PostgreSQL's default ``max_connections`` = 100.
POOL_MAX_SIZE = 10
#: Seconds between two attempts to take a busy advisory lock.
POLL_S = 0.05
#: Advisory lock key held while ``switchboard serve`` adds its triggers to an engine's tables (several launchers on
#: one database may start at once; ``CREATE OR REPLACE`` of one trigger by two sessions at once can fail).
SETUP_KEY_ENGINE = 0x73627467  # "sbtg"


def libpq_url(target: str) -> str:
    """``target`` with its scheme as libpq reads it (``postgresql+psycopg://`` and ``postgres://`` ->
    ``postgresql://``). Raises ValueError when ``target`` is not a PostgreSQL URL."""
    for prefix in ("postgresql+psycopg://", "postgresql+psycopg2://", "postgresql://", "postgres://"):
        if target.startswith(prefix):
            return "postgresql://" + target[len(prefix):]
    raise ValueError(f"not a PostgreSQL URL: {redacted(target)}")


def redacted(target: str) -> str:
    """``target`` without a password (``postgresql://user:***@host/db``), for messages."""
    head, sep, tail = target.partition("://")
    if not sep or "@" not in tail:
        return target
    cred, _, rest = tail.rpartition("@")
    user = cred.split(":", 1)[0]
    return f"{head}://{user}{':***' if ':' in cred else ''}@{rest}"


def open_pool(target: str, *, max_size: int = POOL_MAX_SIZE, **kwargs: Any) -> Any:
    """An open ``psycopg_pool.ConnectionPool`` on ``target`` (1..``max_size`` connections, each checked before it is
    lent); ``kwargs`` go to every ``psycopg.connect`` (e.g. ``autocommit=True``). Waits up to 10 s for the first
    connection. Raises InfrastructureError when the server cannot be reached, ConfigError-free (the URL was
    checked by the caller)."""
    from psycopg_pool import ConnectionPool, PoolTimeout

    pool = ConnectionPool(libpq_url(target), min_size=1, max_size=max_size, kwargs=kwargs, open=False,
                          check=ConnectionPool.check_connection, name="switchboard")
    try:
        pool.open(wait=True, timeout=10.0)
    except PoolTimeout as exc:
        pool.close()
        raise InfrastructureError(f"cannot reach PostgreSQL at {redacted(target)}: {exc}") from None
    return pool


def advisory_key(*parts: str) -> int:
    """A signed 64-bit advisory-lock key from ``parts`` (the first 8 bytes of their SHA-256)."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextmanager
def advisory_lock(target: str, key: int, wait_s: float, busy: str) -> Iterator[None]:
    """Hold the session-level advisory lock ``key`` on the server at ``target`` while the block runs.

    Polls ``pg_try_advisory_lock`` every :data:`POLL_S` seconds for up to ``wait_s`` seconds; then raises
    InputError(``busy``). Raises InfrastructureError when the server cannot be reached."""
    import psycopg

    try:
        conn = psycopg.connect(libpq_url(target), autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise InfrastructureError(f"cannot reach PostgreSQL at {redacted(target)}: {str(exc).strip()}") from None
    try:
        deadline = time.monotonic() + wait_s
        while not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:  # type: ignore[index]
            if time.monotonic() >= deadline:
                raise InputError(busy)
            time.sleep(POLL_S)
    except psycopg.Error as exc:
        conn.close()
        raise InfrastructureError(f"PostgreSQL at {redacted(target)} failed: {str(exc).strip()}") from None
    except BaseException:
        conn.close()
        raise
    try:
        yield
    finally:
        try:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        except psycopg.Error:
            pass  # the connection is gone: the server has released the lock with it
        conn.close()
