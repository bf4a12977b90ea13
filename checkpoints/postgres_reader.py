"""A read-only look at PostgreSQL checkpoints for the CLI's listing commands (``switchboard threads``, ``pending``,
``stats``): the plain channels of each thread's latest root checkpoint and its pending interrupt, in one query each,
as :class:`checkpoints.sqlite_reader.SqliteCheckpointReader` gives them for a SQLite file.

Through the saver's API, a listing is ``PostgresSaver.list(None)``: every checkpoint of every thread with all its
channel blobs and pending writes (``bench/operator_scale.py`` measures 7-10x a bare read of each thread's latest
checkpoint). Here the database picks each thread's latest root checkpoint (``DISTINCT ON (thread_id) … ORDER BY
checkpoint_id DESC``, the table's primary key order) and joins only the blobs of the channels asked for, at the
versions that checkpoint names (the layout of ``langgraph.checkpoint.postgres.base``: primitive values inline in ``checkpoint ->
'channel_values'``, the others in ``checkpoint_blobs`` by ``(channel, version)``). Blobs are decoded as plain data
by :func:`checkpoints.sqlite_reader.load_plain`; a database this module cannot read that way (no checkpoint
tables, another serializer) raises :class:`checkpoints.sqlite_reader.Unreadable`, and the caller uses the saver.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from checkpoints.sqlite_reader import Unreadable, interrupt_payload, load_plain

__all__ = ["PostgresCheckpointReader"]

_LATEST = ("SELECT DISTINCT ON (thread_id) thread_id, checkpoint_id, checkpoint FROM checkpoints "
           "WHERE checkpoint_ns = '' ORDER BY thread_id, checkpoint_id DESC")


class PostgresCheckpointReader:
    """Read-only listing queries on the checkpoint tables of PostgreSQL database ``url`` (one connection, closed by
    :meth:`close`).

    Raises:
        Unreadable: the server cannot be reached or the database has no LangGraph checkpoint tables.
    """

    def __init__(self, url: str):
        import psycopg

        from checkpoints.postgres import libpq_url

        try:
            self.conn = psycopg.connect(libpq_url(url))  # one read-only transaction: one snapshot for every query
            self.conn.read_only = True
            row = self.conn.execute("SELECT to_regclass('checkpoints') IS NOT NULL AND "
                                    "to_regclass('checkpoint_blobs') IS NOT NULL AND "
                                    "to_regclass('checkpoint_writes') IS NOT NULL").fetchone()
        except psycopg.Error as exc:
            raise Unreadable(str(exc).strip()) from exc
        if not (row and row[0]):
            self.conn.close()
            raise Unreadable("no LangGraph checkpoint tables")

    def latest_channel_values(self) -> dict[str, dict]:
        """``{thread_id: channel_values}`` of every thread's latest root checkpoint, most recently updated first
        (every channel stored whole; ``DeltaChannel`` keys are absent). Raises :class:`Unreadable`."""
        return dict(self.iter_latest_channel_values())

    def iter_latest_channel_values(self, channels: Iterable[str] | None = None) -> Iterator[tuple[str, dict]]:
        """:meth:`latest_channel_values` one thread at a time, read from a server-side cursor (memory flat in the
        number of threads); ``channels``: only these keys (the other blobs are not read). Raises
        :class:`Unreadable`."""
        import psycopg

        keep = None if channels is None else sorted(set(channels))
        blob_filter = "" if keep is None else " AND bl.channel = ANY(%(channels)s)"
        sql = (f"WITH latest AS ({_LATEST}) SELECT l.thread_id, l.checkpoint -> 'channel_values', "
               "(SELECT array_agg(array[bl.channel::bytea, bl.type::bytea, bl.blob]) "
               " FROM jsonb_each_text(l.checkpoint -> 'channel_versions') v JOIN checkpoint_blobs bl "
               " ON bl.thread_id = l.thread_id AND bl.checkpoint_ns = '' AND bl.channel = v.key AND bl.version = v.value"
               f"{blob_filter}) FROM latest l ORDER BY l.checkpoint_id DESC")
        try:
            with self.conn.cursor(name="switchboard_listing") as cur:
                cur.itersize = 500
                cur.execute(sql, {"channels": keep})
                for thread_id, inline, blobs in cur:
                    values = {k: v for k, v in (inline or {}).items() if keep is None or k in keep}
                    for channel, type_tag, blob in blobs or []:
                        kind = bytes(type_tag).decode()
                        if kind != "empty":
                            values[bytes(channel).decode()] = load_plain(kind, bytes(blob) if blob is not None else None)
                    yield str(thread_id), values
        except psycopg.Error as exc:
            raise Unreadable(str(exc).strip()) from exc

    def pending_interrupts(self) -> dict[str, Any]:
        """``{thread_id: payload}`` for every thread paused on an interrupt (the first ``__interrupt__`` write of its
        latest root checkpoint, in LangGraph's write order), in one query. Raises :class:`Unreadable`."""
        return self._interrupts("", ())

    def pending_interrupt(self, thread_id: str) -> Any:
        """The payload of the interrupt ``thread_id`` is paused on, or None (as
        :func:`checkpoints.threads.pending_interrupt`). Raises :class:`Unreadable`."""
        return self._interrupts(" AND thread_id = %s", (str(thread_id),)).get(str(thread_id))

    def _interrupts(self, where: str, args: tuple) -> dict[str, Any]:
        import psycopg

        latest = _LATEST.replace("WHERE checkpoint_ns = ''", f"WHERE checkpoint_ns = ''{where}")
        sql = (f"WITH latest AS ({latest}) SELECT w.thread_id, w.type, w.blob FROM latest l JOIN checkpoint_writes w "
               "ON w.thread_id = l.thread_id AND w.checkpoint_ns = '' AND w.checkpoint_id = l.checkpoint_id "
               "AND w.channel = '__interrupt__' ORDER BY w.thread_id, w.task_path, w.task_id, w.idx")
        out: dict[str, Any] = {}
        try:
            rows = self.conn.execute(sql, args).fetchall()
        except psycopg.Error as exc:
            raise Unreadable(str(exc).strip()) from exc
        for thread_id, type_tag, blob in rows:
            value = load_plain(type_tag, bytes(blob) if blob is not None else None)
            if str(thread_id) not in out and not (isinstance(value, (list, tuple)) and not value):
                out[str(thread_id)] = interrupt_payload(value)
        return out

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()
