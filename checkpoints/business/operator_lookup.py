"""A read-only look-up of one operator in a SQLite business database with ``sqlite3`` alone, so that the CLI's read
commands (``threads``, ``pending``, ``history``…) check who is acting without importing SQLAlchemy (a faster
start-up).

It returns the same :class:`~checkpoints.business.records.Operator` record as
:meth:`checkpoints.business.repository.BusinessStore.get_operator` (both convert the row with
:meth:`Operator.from_row`); the decision itself stays in :func:`policies.authz.authorize_operator`. It answers only for
a database already at :data:`~checkpoints.business.records.SCHEMA_VERSION`: anything else (a server URL, a missing
file, an older or newer schema that :func:`checkpoints.business.open_store` would migrate or refuse, a locked or
damaged file) raises :class:`LookupUnavailable`, and the caller opens the store as before.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from checkpoints.business.records import SCHEMA_VERSION, VERSION_TABLE, Operator
from graph.contracts.errors import InfrastructureError

__all__ = ["LookupUnavailable", "sqlite_path", "read_operator"]

_COLUMNS = ("id", "tenant_id", "roles", "enabled", "customer_id", "created_at", "version")


class LookupUnavailable(InfrastructureError):
    """This database cannot be read this way (the caller uses :func:`checkpoints.business.open_store`). An
    :class:`~graph.contracts.errors.InfrastructureError`."""


def sqlite_path(target: str | Path) -> Path | None:
    """The file of business database ``target`` (a path or ``sqlite:///path``) when it is an existing SQLite file;
    None for a server URL (``postgresql://…``), ``:memory:`` or a file that does not exist."""
    text = str(target)
    if "://" in text and not text.startswith("sqlite:///"):
        return None
    text = text.removeprefix("sqlite:///")
    if not text or text == ":memory:" or not Path(text).is_file():
        return None
    return Path(text)


def read_operator(target: str | Path, name: str) -> Operator | None:
    """The operator called ``name`` in the SQLite business database ``target`` (enabled or not), or None when there
    is no such operator. Opens the file read-only (``mode=ro``), reads the schema revision and one row.

    Raises:
        LookupUnavailable: ``target`` is not an existing SQLite file at :data:`SCHEMA_VERSION`, or SQLite failed.
    """
    path = sqlite_path(target)
    if path is None:
        raise LookupUnavailable(f"not a SQLite file: {target}")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0)
    except sqlite3.Error as exc:
        raise LookupUnavailable(str(exc)) from exc
    try:
        rev = conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall()  # a constant name
        if [r[0] for r in rev] != [SCHEMA_VERSION]:
            raise LookupUnavailable(f"schema revision {rev!r}, not {SCHEMA_VERSION}")
        conn.row_factory = sqlite3.Row
        row = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM operators WHERE id = ?", (name,)).fetchone()
    except sqlite3.Error as exc:
        raise LookupUnavailable(str(exc)) from exc
    finally:
        conn.close()
    return None if row is None else Operator.from_row({k: row[k] for k in _COLUMNS})
