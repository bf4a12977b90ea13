"""Checkpointers and thread inspection (SQLite default, Postgres for scale, memory for tests)."""

from checkpoints.factory import open_checkpointer, thread_ids, thread_bytes

__all__ = ["open_checkpointer", "thread_ids", "thread_bytes"]
