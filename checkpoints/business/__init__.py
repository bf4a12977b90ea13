"""The business store of the support desk (customers, cards, transactions, refunds, transfers, tasks, side
effects, approval decisions) on SQLite or PostgreSQL: SQLAlchemy Core, Alembic migrations.

Modules: :mod:`~checkpoints.business.records` (records, vocabularies, rule constants, errors),
:mod:`~checkpoints.business.money` (money and timestamps), :mod:`~checkpoints.business.schema` (tables),
:mod:`~checkpoints.business.migrate` (Alembic, run in code), :mod:`~checkpoints.business.engine` (one engine per
URL and process, SQLite locking, error conversion), :mod:`~checkpoints.business.seed` (demo data),
:mod:`~checkpoints.business.repository` (:class:`BusinessStore`, :func:`open_store`).

Typical use::

    store = open_store()                                   # $SWITCHBOARD_HOME/business.db, demo data on first open
    store = open_store("postgresql://app@db/desk", seed=False)
    store.execute_refund("rf_5001", idempotency_key="task-1/exec")

The names of the SQLAlchemy modules (engine, migrate, repository) are resolved on first use (PEP 562), so
importing the package or a light module of it (``records``, ``money``, ``faults``, ``operator_lookup``) does not load
SQLAlchemy or Alembic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# light modules (records, money) are imported at once; ``money`` is both a submodule and a function, bound here
# after its submodule as before (a lazy name would be shadowed by the submodule once anything imported it)
from checkpoints.business.money import iso, money, money_plain, parse_iso, parse_money
from checkpoints.business.records import (
    CARD_KINDS,
    CARD_STATUSES,
    DECISIONS,
    DEMO_CUSTOMER,
    DEMO_OTHER_CUSTOMER,
    DEMO_TENANT,
    DUPLICATE_WINDOW_HOURS,
    FINAL_DECISIONS,
    OPERATOR_ROLES,
    REFUND_STATUSES,
    REFUND_TRANSITIONS,
    REFUND_WINDOW_DAYS,
    REFUNDABLE_TX_KINDS,
    SCHEMA_VERSION,
    TASK_STATUSES,
    TRANSFER_STATUSES,
    TX_KINDS,
    TX_STATUSES,
    AuditEntry,
    BusinessRuleError,
    Card,
    Customer,
    Decision,
    NotFoundError,
    Operator,
    OwnershipError,
    PaymentNotAuthorized,
    Refund,
    StaleVersionError,
    StorageUnavailable,
    StoreError,
    Task,
    ThreadOwner,
    Token,
    Transaction,
    Transfer,
)

if TYPE_CHECKING:  # the names below, resolved lazily at run time (__getattr__)
    from checkpoints.business.engine import default_store_path
    from checkpoints.business.migrate import current_revision, upgrade
    from checkpoints.business.repository import BusinessStore, open_store, token_digest

__all__ = [
    "BusinessStore",
    "open_store",
    "default_store_path",
    "upgrade",
    "current_revision",
    "money",
    "money_plain",
    "parse_money",
    "iso",
    "parse_iso",
    "Customer",
    "Card",
    "Transaction",
    "Refund",
    "Transfer",
    "Task",
    "Decision",
    "Operator",
    "Token",
    "AuditEntry",
    "ThreadOwner",
    "token_digest",
    "StoreError",
    "StaleVersionError",
    "BusinessRuleError",
    "NotFoundError",
    "OwnershipError",
    "StorageUnavailable",
    "CARD_STATUSES",
    "CARD_KINDS",
    "TX_KINDS",
    "TX_STATUSES",
    "REFUND_STATUSES",
    "REFUND_TRANSITIONS",
    "REFUNDABLE_TX_KINDS",
    "REFUND_WINDOW_DAYS",
    "DUPLICATE_WINDOW_HOURS",
    "TRANSFER_STATUSES",
    "TASK_STATUSES",
    "DECISIONS",
    "FINAL_DECISIONS",
    "OPERATOR_ROLES",
    "DEMO_TENANT",
    "DEMO_CUSTOMER",
    "DEMO_OTHER_CUSTOMER",
    "SCHEMA_VERSION",
    "PaymentNotAuthorized",
]

#: The SQLAlchemy/Alembic names, imported on first use.
_HOME = {"default_store_path": "checkpoints.business.engine", "current_revision": "checkpoints.business.migrate",
         "upgrade": "checkpoints.business.migrate", "BusinessStore": "checkpoints.business.repository",
         "open_store": "checkpoints.business.repository", "token_digest": "checkpoints.business.repository"}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'checkpoints.business' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
