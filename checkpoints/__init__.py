"""Storage: LangGraph checkpointers (SQLite default, Postgres for scale, memory for tests), thread inspection, the
event log's storage and the business store (``checkpoints.business``).

Names are resolved on first use (PEP 562): importing ``checkpoints.business`` or ``checkpoints.event_log`` does not
load LangGraph's savers.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["open_checkpointer", "thread_ids"]

_HOME = {"open_checkpointer": "checkpoints.factory", "thread_ids": "checkpoints.threads"}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'checkpoints' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
