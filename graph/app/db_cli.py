"""``switchboard db …``: schema management of every store of ours (business store, event log, checkpoints).

``switchboard db upgrade [--db postgresql://…]`` brings all three to the schema this version needs, once, before
servers start (``switchboard serve`` calls the same function): the business store by its Alembic migrations
(``checkpoints.business.migrate``), the event log's table, LangGraph's checkpoint tables (``PostgresSaver.setup`` /
``SqliteSaver.setup``). Idempotent; each step takes a lock, so concurrent runs wait for each other.
"""

from __future__ import annotations

import typer
from rich.console import Console

__all__ = ["db_app", "upgrade_all"]

db_app = typer.Typer(help="Schema of the stores (business records, event log, checkpoints).", no_args_is_help=True)
console = Console()


def upgrade_all(db: str | None = None, business_db: str | None = None) -> dict[str, str]:
    """Create or migrate every store named by the settings (``db`` and ``business_db`` override
    ``SWITCHBOARD_DB`` / ``SWITCHBOARD_BUSINESS_DB``; on PostgreSQL the business store defaults to ``db``).

    Returns ``{"business": <Alembic revision>, "events": <target>, "checkpoints": <target>}``. Raises ConfigError
    (an unsupported target), InfrastructureError / StorageUnavailable (a server or file that cannot be used)."""
    # deferred: LangGraph's savers, Alembic and pydantic-settings, for this command only (start-up of the CLI)
    from checkpoints import open_checkpointer
    from checkpoints.business import upgrade
    from checkpoints.event_log import open_event_log
    from graph.contracts.settings import Settings

    settings = Settings.from_env(db=db, business_db=business_db)
    revision = upgrade(settings.business_db)
    log = open_event_log(settings.db)
    log.close()
    saver = open_checkpointer(settings.db)
    pool = getattr(saver, "conn", None)
    if hasattr(pool, "getconn"):
        pool.close()  # type: ignore[union-attr]
    return {"business": revision, "events": log.target, "checkpoints": log.target}


@db_app.command("upgrade")
def upgrade_cmd(
    db: str | None = typer.Option(None, "--db", help="Checkpoint and event database: a SQLite file or "
                                     "postgresql://… (then the business store too). Env: SWITCHBOARD_DB."),
    business_db: str | None = typer.Option(None, "--business-db", help="Business database, when elsewhere. "
                                              "Env: SWITCHBOARD_BUSINESS_DB."),
) -> None:
    """Create or migrate every store (run once before starting several servers on one database)."""
    out = upgrade_all(db, business_db)
    console.print(f"business store at revision {out['business']}; event log and checkpoints ready in "
                  f"{out['checkpoints']}", highlight=False)
