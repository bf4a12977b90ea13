"""Naming the cause of a storage fault, and refusing to re-create a business store that went missing.

SQLite reports a full disk, a file-size limit and a read-only file system in words that do not say so ("disk I/O
error", "unable to open database file"). :func:`storage_cause` turns the driver's message plus what the file system
says about the file into one short cause: ``read-only file system``, ``disk full``, ``file size limit of N bytes
reached (disk full for this process)``, ``corrupt (…)``, or the driver's own words.

:func:`require_business_store` stops a run from silently creating and re-seeding a fresh demo business store next to
checkpoints that refer to the old one (a deleted ``business.db`` would otherwise come back with new demo data, and
paused refunds would point at records that never existed).
"""

from __future__ import annotations

import os
import resource
import shutil
import sqlite3
from pathlib import Path

from checkpoints.business.records import StorageUnavailable

__all__ = ["storage_cause", "require_business_store", "MissingBusinessStore"]

_CORRUPT = ("file is not a database", "malformed", "not a database", "database corrupt")
_FULL = ("database or disk is full", "disk i/o error", "file too large", "no space left")


class MissingBusinessStore(StorageUnavailable):
    """The business database file is missing, empty or truncated while the checkpoint database holds threads:
    one-line message naming both files and the cause. Nothing is created; restore the file from a backup (or start
    a new home)."""


#: Bytes of a SQLite database header (https://www.sqlite.org/fileformat.html §1.3): any shorter file is no database.
_SQLITE_HEADER = 100


def _missing_cause(path: Path) -> str | None:
    """Why the SQLite file ``path`` holds no database: ``"missing"``, ``"empty (0 bytes)"``, ``"truncated (N bytes,
    shorter than a SQLite header)"``; None when it is at least a header long (SQLite itself judges the rest)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "missing"
    except OSError:
        return None
    if size == 0:
        return "empty (0 bytes)"  # SQLite would treat it as a new database, and switchboard would re-seed it
    if size < _SQLITE_HEADER:
        return f"truncated ({size} bytes, shorter than a SQLite header)"
    return None


def _read_only(path: Path | None) -> bool:
    folder = path if path is not None and path.is_dir() else (path.parent if path is not None else None)
    if folder is None or not folder.exists():
        return False
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return True
    except OSError:
        return False
    target = path if path is not None and path.exists() else folder
    return not os.access(target, os.W_OK)


def storage_cause(message: str, path: Path | None = None) -> str:
    """One short cause for a storage error ``message`` (the driver's text) on the file ``path`` (None for a server):

    * a read-only file system or an unwritable file/folder -> ``"read-only (<message>)"``;
    * a full disk (``shutil.disk_usage`` free < 64 KiB) -> ``"disk full (<message>)"``; a finite ``RLIMIT_FSIZE``
      with a write error -> ``"file size limit of N bytes reached (<message>)"``;
    * "file is not a database" / "malformed" -> ``"corrupt (<message>)"``;
    * anything else: ``message`` itself."""
    text = (message or "").strip().splitlines()[0] if (message or "").strip() else "unknown error"
    low = text.lower()
    if any(k in low for k in _CORRUPT):
        return f"corrupt ({text})"
    if path is not None and ("readonly" in low or "read-only" in low or "unable to open" in low or any(k in low for k in _FULL)):
        if _read_only(path):
            return f"read-only ({text})"
    if any(k in low for k in _FULL) or "unable to open" in low:
        soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY:
            return f"file size limit of {soft} bytes reached: disk full for this process ({text})"
        folder = path.parent if path is not None else None
        try:
            if folder is not None and shutil.disk_usage(folder).free < 64 * 1024:
                return f"disk full ({text})"
        except OSError:
            pass
    return text


def _require_checkpoints(business_db: Path, checkpoint_db: Path) -> None:
    """The reverse check: raise :class:`MissingBusinessStore` when ``checkpoint_db`` is an empty or truncated file
    while ``business_db`` records threads (tasks or thread owners), which SQLite would silently treat as a new,
    empty checkpoint database. A missing checkpoint file is a new one (``--db`` may name a fresh file)."""
    if not checkpoint_db.is_file():
        return
    cause = _missing_cause(checkpoint_db)
    if cause is None or not _records_threads(business_db):
        return
    raise MissingBusinessStore(f"checkpoint database {checkpoint_db} is {cause} but the business database "
                               f"{business_db} holds refund tasks or threads; restore it from a backup (it is never "
                               "re-created under existing business records)")


def _records_threads(business_db: Path) -> bool:
    """Does the SQLite business store ``business_db`` hold a task or a thread owner? (False when it is not a
    readable business store: nothing to protect.)"""
    if _missing_cause(business_db) is not None:
        return False
    try:
        conn = sqlite3.connect(f"file:{business_db}?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        return any(conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None  # fixed names
                   for table in ("tasks", "thread_owners"))
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def _has_checkpoints(checkpoint_db: Path) -> bool:
    try:
        conn = sqlite3.connect(f"file:{checkpoint_db}?mode=ro", uri=True)
    except sqlite3.Error:
        return checkpoint_db.stat().st_size > 0
    try:
        return conn.execute("SELECT 1 FROM checkpoints LIMIT 1").fetchone() is not None
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return False  # only the event log (or nothing yet) lives there: no thread to protect
        return checkpoint_db.stat().st_size > 0
    except sqlite3.Error:
        return checkpoint_db.stat().st_size > 0  # unreadable: assume it holds threads (never re-seed over them)
    finally:
        conn.close()


def require_business_store(business_db: str | Path, checkpoint_db: str | Path | None) -> None:
    """Raise :class:`MissingBusinessStore` when ``business_db`` is a SQLite file that does not exist, is empty
    (0 bytes) or is shorter than a SQLite header while ``checkpoint_db`` (a SQLite file) holds checkpoints, and
    the reverse: ``checkpoint_db`` empty or truncated while ``business_db`` records tasks or thread owners.
    Servers (``postgresql://``) and ``memory`` are not checked:
    a server database is created by its operator, never by switchboard."""
    b, c = str(business_db), str(checkpoint_db or "")
    if b.startswith(("postgres://", "postgresql://")) or not c or c == "memory" or c.startswith(("postgres", "sqlite:")):
        return
    b = b.removeprefix("sqlite:///")
    _require_checkpoints(Path(b), Path(c))
    cause = _missing_cause(Path(b))
    if cause is None or not Path(c).is_file():
        return
    if _has_checkpoints(Path(c)):
        raise MissingBusinessStore(f"business database {b} is {cause} but the checkpoint database {c} holds threads; "
                                   "restore it from a backup (it is never re-created or re-seeded over existing "
                                   "threads)")
