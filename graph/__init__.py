"""switchboard's public API: the compiled graph and the convenience layer for scripts and the CLI."""

from graph.builder import build_graph
from graph.context import RunContext
from graph.settings import Settings

__all__ = ["build_graph", "RunContext", "Settings", "Conversation", "TurnResult"]


def __getattr__(name: str):
    if name in ("Conversation", "TurnResult"):
        from graph import conversation

        return getattr(conversation, name)
    raise AttributeError(name)
