"""Checkpointers and thread inspection (SQLite default, Postgres for scale, memory for tests), and the business
store (:mod:`checkpoints.business`).

The checkpointer names below are loaded on first use (module ``__getattr__``), so ``import checkpoints.business``
does not import LangGraph.
"""

from __future__ import annotations

from typing import Any

__all__ = ["open_checkpointer", "thread_ids", "thread_bytes"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from checkpoints import factory

        return getattr(factory, name)
    raise AttributeError(f"module 'checkpoints' has no attribute {name!r}")
