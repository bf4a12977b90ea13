"""Alembic environment of the business store (run by Alembic, not imported by the package).

:func:`checkpoints.business.migrate.upgrade` hands Alembic an open connection (``config.attributes
["connection"]``) inside a transaction it already began (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: after an
advisory lock), so two processes opening one database migrate it once. No ``alembic.ini`` is needed: the
configuration is built in code (:func:`checkpoints.business.migrate.alembic_config`).
"""

from __future__ import annotations

from alembic import context

from checkpoints.business.migrate import VERSION_TABLE
from checkpoints.business.schema import metadata


def run_migrations() -> None:
    """Run the pending migrations on the connection that the caller passed in ``config.attributes``."""
    config = context.config
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run the business store's migrations through checkpoints.business.migrate.upgrade()")
    context.configure(connection=connection, target_metadata=metadata, version_table=VERSION_TABLE,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


try:
    context.is_offline_mode()
except NameError:  # imported outside an Alembic run (e.g. by an import check): nothing to do
    pass
else:
    run_migrations()
