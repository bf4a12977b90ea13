"""switchboard's public API: the compiled graph and the convenience layer for scripts and the CLI.

The names are loaded on first use (module ``__getattr__``), so importing a contract module such as
``graph.errors`` does not import the builder (and LangGraph) with it.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["build_graph", "RunContext", "Settings", "Conversation", "TurnResult"]

_HOME = {"build_graph": "graph.builder", "RunContext": "graph.context", "Settings": "graph.settings",
         "Conversation": "graph.conversation", "TurnResult": "graph.conversation"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(_HOME[name]), name)
    raise AttributeError(f"module 'graph' has no attribute {name!r}")
