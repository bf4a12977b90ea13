"""switchboard's public API: the compiled graph and the convenience layer for scripts and the CLI.

Names are resolved on first use (PEP 562), so importing a contract module such as ``graph.contracts.state`` or
``graph.contracts.errors`` does not load the builder, the nodes or LangGraph's runtime (no import cycle, fast start-up).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["build_graph", "RunContext", "Settings", "Conversation", "TurnResult"]

_HOME = {"build_graph": "graph.builder", "RunContext": "graph.contracts.context", "Settings": "graph.contracts.settings",
         "Conversation": "graph.conversation", "TurnResult": "graph.contracts.results"}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'graph' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
