"""LangGraph's SqliteSaver with short channel versions: the only change is the documented ``get_next_version`` hook."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver

__all__ = ["CompactSqliteSaver", "compact_next_version", "VERSION_DIGITS"]

#: Digits of a channel version written by our SQLite saver (10**8 steps of one thread before the width grows).
VERSION_DIGITS = 8


def compact_next_version(current: str | int | float | None, channel: None = None) -> str:
    """The channel version after ``current``: the step counter, zero-padded to ``VERSION_DIGITS`` digits (``"00000043"``).

    LangGraph's SqliteSaver writes ``f"{n:032}.{random:016}"`` (50 characters), and every checkpoint stores one
    version per channel and per node that saw it: about 2 kB of a 3 kB checkpoint, a third of a thread's bytes
    (bench/storage.py). ``BaseCheckpointSaver.get_next_version`` documents that a saver may use any increasing
    ``str``/``int``/``float`` versions; these stay strings, so a thread written with the long form goes on
    comparing correctly: its counter (the part before the ".") is carried on, and an 8-digit string is greater than
    any 32-digit-padded one below 10**24. The random suffix keeps versions of forked branches apart where blobs are
    stored per version (PostgreSQL); SQLite stores each checkpoint whole, so it is not needed there."""
    n = 0 if current is None else int(str(current).split(".")[0])
    return f"{n + 1:0{VERSION_DIGITS}d}"


class CompactSqliteSaver(SqliteSaver):
    """LangGraph's SqliteSaver with :func:`compact_next_version` versions (nothing else changed; opened by
    ``checkpoints.open_checkpointer``)."""

    def get_next_version(self, current: Any, channel: None = None) -> str:  # type: ignore[override]
        return compact_next_version(current, channel)
