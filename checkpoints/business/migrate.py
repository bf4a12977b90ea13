"""Schema migrations of the business store with Alembic, run in code (no ``alembic.ini``).

* :func:`upgrade` brings a database to a revision (default ``head``) and returns the revision it is at;
  :func:`current_revision` reads it. Both take what :func:`checkpoints.business.open_store` takes (a path,
  ``sqlite:///…`` or ``postgresql://…``).
* :func:`ensure_schema` is what opening a store calls: once per process and database, two small queries when
  the database is already at :data:`~checkpoints.business.schema.SCHEMA_VERSION` (Alembic is not even
  imported then), else a full :func:`upgrade`.
* A SQLite file made by the first release (all the tables of revision 0001, no version table) is adopted:
  stamped ``0001``, then upgraded like any other.
* Two processes opening a fresh database at once migrate it once: the upgrade runs in one transaction that
  holds SQLite's write lock (``BEGIN IMMEDIATE``) or, on PostgreSQL, a transaction-level advisory lock
  (:data:`ADVISORY_LOCK`), and reads the current revision only after taking it.

The revision scripts live in ``migrations/versions`` (shipped as package data). To add one, copy the newest
file to ``NNNN_what.py`` with ``revision = "NNNN"`` and ``down_revision`` = the previous id, write its
``upgrade()``/``downgrade()`` with ``alembic.op``, add the tables or columns to
:mod:`checkpoints.business.schema` and raise ``SCHEMA_VERSION`` (in :mod:`checkpoints.business.records`) to
``"NNNN"`` (a test checks that it equals the scripts' head).
``alembic.command.revision(alembic_config(), "message", rev_id="NNNN")`` writes the file from the template too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.engine import URL, Connection

from checkpoints.business.engine import (
    WRITE,
    describe,
    dispose,
    engine_for,
    resolve_url,
    sqlite_path,
    storage_errors,
)
from checkpoints.business.records import VERSION_TABLE as _VERSION_TABLE
from checkpoints.business.records import StorageUnavailable
from checkpoints.business.schema import SCHEMA_VERSION, TABLES_0001

if TYPE_CHECKING:  # Alembic is imported when a migration runs, not on the fast path of opening a store
    from alembic.config import Config

__all__ = ["VERSION_TABLE", "ADVISORY_LOCK", "MIGRATIONS", "alembic_config", "upgrade", "current_revision",
           "head_revision", "ensure_schema"]

#: Where Alembic records the revision: a table of its own, so that other Alembic-managed schemas of the
#: project (e.g. the event log) can share one PostgreSQL database without sharing a version table.
VERSION_TABLE = _VERSION_TABLE  # defined in checkpoints.business.records (read without SQLAlchemy)
#: PostgreSQL advisory lock key held while migrating (an arbitrary constant of this store: "sbbs" in ASCII).
ADVISORY_LOCK = 0x73626273
#: The Alembic script directory (env.py, the template, versions/).
MIGRATIONS = Path(__file__).resolve().parent / "migrations"

#: (pid, URL) -> identity of the SQLite file (None for a server) when it was last found at the head.
_AT_HEAD: dict[tuple[int, str], object] = {}


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic ``Config`` for the business store's scripts; with ``connection``, migrations run on it."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision among the scripts (what ``upgrade()`` goes to)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(target: str | Path | URL | None = None) -> str | None:
    """The revision the database at ``target`` is at: None for an empty database, ``"legacy"`` for a file of the
    first release not yet adopted. Raises :class:`StorageUnavailable` when the database cannot be read."""
    url = resolve_url(target)
    with storage_errors(url), engine_for(url).connect() as conn:
        revision = _read_revision(conn)
        if revision is None and _legacy_tables(conn, url):
            return "legacy"
        return revision


def upgrade(target: str | Path | URL | None = None, revision: str = "head") -> str:
    """Migrate the database at ``target`` (a path, ``sqlite:///…``, ``postgresql://…``; default the store's
    default path) to ``revision`` and return the revision it is at afterwards. Idempotent: at that revision
    already (or past it: upgrade never goes back), nothing changes. Adopts a first-release SQLite file (stamp
    ``0001``) first.

    Raises :class:`StorageUnavailable` (database unreachable, corrupt, read-only; tables of another
    application; a revision newer than this code knows), ``ValueError`` (an unknown ``revision``; an in-memory
    target), :class:`~graph.contracts.errors.ConfigError` (a target that is not a supported database)."""
    from alembic import command
    from alembic.script.revision import RevisionError
    from alembic.util import CommandError

    url = resolve_url(target)
    engine = engine_for(url)
    with storage_errors(url), engine.connect() as conn:
        conn.execution_options(**{WRITE: True})
        with conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK})
            before = _read_revision(conn)
            if before is None and _legacy_tables(conn, url):
                command.stamp(alembic_config(conn), "0001")
                before = "0001"
            _refuse_unknown(before, url)
            try:
                command.upgrade(alembic_config(conn), revision)
            except (RevisionError, CommandError) as exc:
                raise ValueError(f"cannot upgrade {describe(url)} from {before} to {revision}: {exc}") from None
            after = _read_revision(conn)
    assert after is not None
    return after


def ensure_schema(url: URL) -> None:
    """Make sure the database at ``url`` is at :data:`SCHEMA_VERSION` (what the repository reads and writes).

    Checked once per process and database: a database at the head costs two small queries (is there a version
    table, which revision does it hold); otherwise :func:`upgrade`. A SQLite file replaced or deleted on disk
    since the last check is checked again, after closing the pooled connections that still point at the old
    file. Raises :class:`StorageUnavailable`."""
    key = (os.getpid(), url.render_as_string(hide_password=False))
    identity = _file_identity(url)
    if key in _AT_HEAD:
        if _AT_HEAD[key] == identity:
            return
        dispose(url)  # the file changed under a pool of connections to the old one
    with storage_errors(url), engine_for(url).connect() as conn:
        revision = _read_revision(conn)
    if revision != SCHEMA_VERSION:
        upgrade(url)
    _AT_HEAD[key] = _file_identity(url)


def _file_identity(url: URL) -> object:
    path = sqlite_path(url)
    if path is None:
        return None
    try:
        st = path.stat()
    except OSError:
        return "missing"
    return (st.st_dev, st.st_ino)


def _read_revision(conn: Connection) -> str | None:
    """The revision in the version table (None: no table or no row). Plain SQL, so that opening a store at the
    head does not import Alembic."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


def _legacy_tables(conn: Connection, url: URL) -> bool:
    """True when every table of revision 0001 exists (a first-release database); False when none does.
    Raises :class:`StorageUnavailable` for a database holding some of them only (another application's)."""
    existing = set(inspect(conn).get_table_names())
    present = [name for name in TABLES_0001 if name in existing]
    if present and len(present) < len(TABLES_0001):
        missing = sorted(set(TABLES_0001) - existing)
        raise StorageUnavailable(f"business database {describe(url)} is unavailable: it has tables "
                                 f"{', '.join(present)} but not {', '.join(missing)} (not a switchboard database)")
    return bool(present)


def _refuse_unknown(revision: str | None, url: URL) -> None:
    if revision is None:
        return
    from alembic.script import ScriptDirectory
    from alembic.script.revision import RevisionError
    from alembic.util import CommandError

    script = ScriptDirectory.from_config(alembic_config())
    try:
        script.get_revision(revision)
    except (RevisionError, CommandError):
        raise StorageUnavailable(
            f"business database {describe(url)} is unavailable: it is at schema revision {revision}, which this "
            f"version of switchboard does not know (it knows up to {SCHEMA_VERSION}); upgrade switchboard"
        ) from None
