"""One lock per thread, so that two turns on one thread run one after the other (whatever process runs them).

:func:`thread_lock` picks the lock by where the checkpoints live: on PostgreSQL a session-level advisory lock on that
server (``checkpoints.postgres.advisory_lock``; processes on several machines wait for each other, and a process
killed with SIGKILL releases it with its connection); otherwise an exclusive file lock on
``$SWITCHBOARD_HOME/locks/<sha256(thread)[:32]>.lock`` (``filelock``; one machine).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

from filelock import FileLock, Timeout

from graph.contracts.errors import InputError
from graph.contracts.settings import home_dir, is_postgres

__all__ = ["thread_lock"]


@contextmanager
def thread_lock(db: str, thread_id: str, wait_s: float) -> Iterator[None]:
    """Hold the lock of ``thread_id`` while the block runs; ``db`` is the checkpoint database (path or URL).

    Raises InputError (``thread … is busy with another turn``) after ``wait_s`` seconds, or when the lock file cannot
    be created; InfrastructureError when the PostgreSQL server cannot be reached."""
    busy = f"thread {thread_id} is busy with another turn; try again"
    if is_postgres(db):
        from checkpoints.postgres import advisory_key, advisory_lock

        with advisory_lock(db, advisory_key("switchboard-thread", thread_id), wait_s, busy):
            yield
        return
    folder = home_dir() / "locks"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the thread lock in {folder}: {exc.strerror or exc}") from None
    lock = FileLock(str(folder / (hashlib.sha256(thread_id.encode()).hexdigest()[:32] + ".lock")))
    try:
        lock.acquire(timeout=wait_s, poll_interval=0.05)
    except Timeout:
        raise InputError(busy) from None
    except OSError as exc:
        raise InputError(f"cannot create the thread lock in {folder}: {exc.strerror or exc}") from None
    try:
        yield
    finally:
        lock.release()
