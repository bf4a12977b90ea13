"""LangGraph's SqliteSaver with short channel versions (the documented ``get_next_version`` hook) and deleted
threads that stay deleted.

Deleted threads: LangGraph's ``delete_thread`` removes a thread's rows but does not stop a run that is still in flight
on it (another thread or process, holding a config from before the delete) from writing its next checkpoint and
pending writes, which brings the thread back with a partial state (a known LangGraph behaviour: their pull request
7207 adds tombstones to their savers). Here ``delete_thread`` records a tombstone in
:data:`TOMBSTONES` in the same transaction as the deletes, and triggers on ``checkpoints`` and ``writes`` abort any
later insert for that thread inside the database, whichever process or connection writes it. The saver turns the
abort into :class:`graph.contracts.errors.ThreadDeleted`, so the late run stops at its next step (it does not go on to make a
refund on a thread nobody can see). A deleted thread id is never reused: a new conversation on it is refused too.

Reading a thread: LangGraph rebuilds a ``DeltaChannel`` (the transcript) at a checkpoint from the
nearest ancestor holding a full copy (a snapshot) plus every write since, deserialising all of them on every read:
twice a turn (the desk's ``get_state`` and the run itself), so a turn's cost grew with the thread. The saver keeps the
histories it returned for the last checkpoints of the last threads it read (:data:`HISTORY_THREADS` threads,
:data:`HISTORY_CHECKPOINTS` checkpoints each) and, for a later checkpoint of the same thread, walks back only to the
nearest one it knows, reading just the checkpoints and writes since; a write this saver stored itself lately
(:data:`WRITTEN_CHECKPOINTS` checkpoints a thread) comes back as the object it was given instead of a deserialised
copy. The result is the one LangGraph's own walk gives (a snapshot met on the way still ends the walk there), and the
same seed and write objects come back on every read, so ``graph.contracts.state.FoldingDeltaChannel`` and the transcript scans
(``nodes.transcript.fold_transcript``) continue their last run instead of redoing it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, DeltaChannelHistory, PendingWrite, get_checkpoint_id, writes_sort_key
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite._delta import DELTA_STAGE1_SQL, build_delta_stage2_sql

from graph.contracts.errors import ThreadDeleted

__all__ = ["CompactSqliteSaver", "compact_next_version", "VERSION_DIGITS", "TOMBSTONES", "DELETED_MARK",
           "HISTORY_THREADS", "HISTORY_CHECKPOINTS", "WRITTEN_CHECKPOINTS"]

#: Digits of a channel version written by our SQLite saver (10**8 steps of one thread before the width grows).
VERSION_DIGITS = 8
#: The table of deleted thread ids (one row per thread, kept for good).
TOMBSTONES = "checkpoint_deleted_threads"
#: The message of the triggers' abort (how the saver tells it from other constraint errors).
DELETED_MARK = "switchboard: thread deleted"

#: Threads whose latest channel histories a saver keeps in memory (least recently read dropped first).
HISTORY_THREADS = 32
#: Checkpoints per thread whose histories are kept (the newest read).
HISTORY_CHECKPOINTS = 8
#: Checkpoints per thread whose written values are kept (the newest written).
WRITTEN_CHECKPOINTS = 64

_TOMBSTONE_SQL = f"""
CREATE TABLE IF NOT EXISTS {TOMBSTONES} (
    thread_id TEXT PRIMARY KEY,
    deleted_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
CREATE TRIGGER IF NOT EXISTS refuse_deleted_thread_checkpoints BEFORE INSERT ON checkpoints
WHEN EXISTS (SELECT 1 FROM {TOMBSTONES} WHERE thread_id = NEW.thread_id)
BEGIN SELECT RAISE(ABORT, '{DELETED_MARK}'); END;
CREATE TRIGGER IF NOT EXISTS refuse_deleted_thread_writes BEFORE INSERT ON writes
WHEN EXISTS (SELECT 1 FROM {TOMBSTONES} WHERE thread_id = NEW.thread_id)
BEGIN SELECT RAISE(ABORT, '{DELETED_MARK}'); END;
"""


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


@contextmanager
def _refused_when_deleted(thread_id: Any) -> Iterator[None]:
    """Turn the triggers' abort into ThreadDeleted (other database errors pass unchanged)."""
    try:
        yield
    except sqlite3.IntegrityError as exc:
        if DELETED_MARK not in str(exc):
            raise
        raise ThreadDeleted(f"thread {thread_id} was deleted; nothing more is stored for it") from None


class CompactSqliteSaver(SqliteSaver):
    """LangGraph's SqliteSaver with :func:`compact_next_version` versions and tombstones of deleted threads (module
    doc); opened by ``checkpoints.open_checkpointer``.

    ``put`` / ``put_writes`` raise :class:`graph.contracts.errors.ThreadDeleted` for a thread that ``delete_thread`` deleted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # (thread_id, checkpoint_ns) -> {checkpoint_id -> {channel -> history}}, both least recently used first
        self._histories: OrderedDict[tuple[str, str], OrderedDict[str, dict[str, DeltaChannelHistory]]] = OrderedDict()
        self._histories_lock = threading.Lock()
        # (thread_id, checkpoint_ns) -> {checkpoint_id -> {(task_id, idx, channel) -> the value put_writes stored}}
        self._written: OrderedDict[tuple[str, str], OrderedDict[str, dict[tuple[str, int, str], Any]]] = OrderedDict()

    def setup(self) -> None:
        if self.is_setup:
            return
        super().setup()
        try:
            self.conn.executescript(_TOMBSTONE_SQL)
        except sqlite3.OperationalError as exc:
            if "readonly database" not in str(exc):  # a read-only file is read, never written
                raise

    def get_next_version(self, current: Any, channel: None = None) -> str:  # type: ignore[override]
        return compact_next_version(current, channel)

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        with _refused_when_deleted(config["configurable"].get("thread_id")):
            return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        """LangGraph's ``SqliteSaver.put_writes`` (the same rows), keeping the values it stored for later reads of the
        thread (module doc); only when every row was written (``INSERT OR IGNORE`` keeps a row already there)."""
        conf = config["configurable"]
        replace = all(w[0] in WRITES_IDX_MAP for w in writes)
        query = (f"INSERT OR {'REPLACE' if replace else 'IGNORE'} INTO writes (thread_id, checkpoint_ns, checkpoint_id, "
                 "task_id, task_path, idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
        rows = [(str(conf["thread_id"]), str(conf["checkpoint_ns"]), str(conf["checkpoint_id"]), task_id, task_path,
                 WRITES_IDX_MAP.get(channel, idx), channel, *self.serde.dumps_typed(value))
                for idx, (channel, value) in enumerate(writes)]
        with _refused_when_deleted(conf.get("thread_id")):
            with self.cursor() as cur:
                cur.executemany(query, rows)
                stored = cur.rowcount == len(rows)
        if stored and writes:
            self._remember_written((str(conf["thread_id"]), str(conf["checkpoint_ns"])), str(conf["checkpoint_id"]),
                                   {(task_id, WRITES_IDX_MAP.get(ch, idx), ch): v for idx, (ch, v) in enumerate(writes)})

    def _remember_written(self, key: tuple[str, str], checkpoint_id: str, values: dict[tuple[str, int, str], Any]) -> None:
        with self._histories_lock:
            entries = self._written.setdefault(key, OrderedDict())
            self._written.move_to_end(key)
            entries.setdefault(checkpoint_id, {}).update(values)
            entries.move_to_end(checkpoint_id)
            while len(entries) > WRITTEN_CHECKPOINTS:
                entries.popitem(last=False)
            while len(self._written) > HISTORY_THREADS:
                self._written.popitem(last=False)

    # -- reading DeltaChannels (module doc) ------------------------------------------------------------------------
    def get_delta_channel_history(self, *, config: Any, channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        """LangGraph's ``SqliteSaver.get_delta_channel_history`` (same contract and result), walking back only to the
        nearest checkpoint whose history this saver returned lately (module doc). Each call returns new dicts and
        lists; the seed values and written values inside are shared between calls and must not be changed in place
        (LangGraph's channels and our reducers never do)."""
        if not channels:
            return {}
        channels = list(channels)
        thread_id = str(config["configurable"]["thread_id"])
        checkpoint_ns = str(config["configurable"].get("checkpoint_ns", ""))
        checkpoint_id = get_checkpoint_id(config)
        if not checkpoint_id:
            target = self.get_tuple(config)
            if target is None:
                return {ch: {"writes": []} for ch in channels}
            checkpoint_id = target.config["configurable"]["checkpoint_id"]
        key = (thread_id, checkpoint_ns)
        known = self._known_histories(key)
        hit = known.get(checkpoint_id, {})
        if all(ch in hit for ch in channels):
            return {ch: _copied(hit[ch]) for ch in channels}
        result = self._walk_histories(thread_id, checkpoint_ns, checkpoint_id, channels, known)
        self._remember_histories(key, checkpoint_id, result)
        return {ch: _copied(h) for ch, h in result.items()}

    def _known_histories(self, key: tuple[str, str]) -> dict[str, dict[str, DeltaChannelHistory]]:
        with self._histories_lock:
            entries = self._histories.get(key)
            if entries is None:
                return {}
            self._histories.move_to_end(key)
            return {cid: dict(h) for cid, h in entries.items()}

    def _remember_histories(self, key: tuple[str, str], checkpoint_id: str,
                            histories: Mapping[str, DeltaChannelHistory]) -> None:
        with self._histories_lock:
            entries = self._histories.setdefault(key, OrderedDict())
            self._histories.move_to_end(key)
            entries.setdefault(checkpoint_id, {}).update(histories)
            entries.move_to_end(checkpoint_id)
            while len(entries) > HISTORY_CHECKPOINTS:
                entries.popitem(last=False)
            while len(self._histories) > HISTORY_THREADS:
                self._histories.popitem(last=False)

    def _forget_histories(self, thread_id: str) -> None:
        with self._histories_lock:
            for key in [k for k in self._histories if k[0] == thread_id]:
                del self._histories[key]
            for key in [k for k in self._written if k[0] == thread_id]:
                del self._written[key]

    def _walk_histories(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, channels: list[str],
                        known: Mapping[str, Mapping[str, DeltaChannelHistory]]) -> dict[str, DeltaChannelHistory]:
        """The two stages of LangGraph's ``SqliteSaver.get_delta_channel_history`` (the ancestor walk from the target,
        then the writes of the walked checkpoints), where a channel's walk also ends at an ancestor whose history is
        ``known``: that ancestor's writes are read, and its history comes before them."""
        with self.cursor(transaction=False) as cur:
            chain, seeds, bases = self._ancestors(cur, thread_id, checkpoint_ns, checkpoint_id, channels, known)
            walked_channels = [ch for ch in channels if chain[ch]]
            sql = build_delta_stage2_sql(has_task_path=self._has_task_path,
                                         chain_lens=[len(chain[ch]) for ch in walked_channels])
            rows: list = []
            if sql:
                params: list[Any] = []
                for ch in walked_channels:
                    params.extend([thread_id, checkpoint_ns, ch, *chain[ch]])
                cur.execute(sql, params)
                rows = cur.fetchall()
        found = self._writes_of(thread_id, checkpoint_ns, channels, chain, rows)
        out: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            base = bases.get(ch)
            history: DeltaChannelHistory = {"writes": [*base["writes"], *found[ch]] if base is not None else found[ch]}
            if base is not None and "seed" in base:
                history["seed"] = base["seed"]
            elif base is None and ch in seeds:
                history["seed"] = seeds[ch]
            out[ch] = history
        return out

    def _ancestors(self, cur: Any, thread_id: str, checkpoint_ns: str, checkpoint_id: str, channels: list[str],
                   known: Mapping[str, Mapping[str, DeltaChannelHistory]]
                   ) -> tuple[dict[str, list[str]], dict[str, Any], dict[str, DeltaChannelHistory]]:
        """Stage 1: per channel, the ancestors whose writes count (newest first), and the seed (a snapshot met) or
        the known history the walk ended at. An ancestor with a known history for a channel holds no snapshot of it
        (a history is only asked for where there is none), so the cache is looked at first and that ancestor's
        checkpoint is not deserialised."""
        chain: dict[str, list[str]] = {ch: [] for ch in channels}
        seeds: dict[str, Any] = {}
        bases: dict[str, DeltaChannelHistory] = {}
        active = set(channels)
        walked: set[str] = set()
        started = False
        cur.execute(DELTA_STAGE1_SQL, (thread_id, checkpoint_ns, checkpoint_id, thread_id, checkpoint_ns))
        for cid, type_tag, blob in cur:
            if not started:
                started = cid == checkpoint_id  # the target's own writes and value are not part of it
                walked.add(cid)
                continue
            if cid in walked:
                break  # a loop in the parent chain (``put`` is INSERT OR REPLACE): LangGraph stops there too
            walked.add(cid)
            for ch in active:
                chain[ch].append(cid)
            for ch in [ch for ch in active if ch in known.get(cid, {})]:
                bases[ch] = known[cid][ch]
                active.discard(ch)
            if active:
                values = self.serde.loads_typed((type_tag, blob)).get("channel_values") or {}
                for ch in [ch for ch in active if ch in values]:
                    seeds[ch] = values[ch]
                    active.discard(ch)
            if not active:
                break
        return chain, seeds, bases

    def _writes_of(self, thread_id: str, checkpoint_ns: str, channels: list[str], chain: Mapping[str, list[str]],
                   rows: list) -> dict[str, list[PendingWrite]]:
        """Stage 2: each channel's writes along its chain, oldest first and in LangGraph's order within a checkpoint
        (``writes_sort_key``); a value this saver wrote itself is that object, any other is deserialised."""
        with self._histories_lock:
            written = {cid: dict(v) for cid, v in (self._written.get((thread_id, checkpoint_ns)) or {}).items()}
        by_cid: dict[tuple[str, str], list[tuple[str, str, int, str, bytes]]] = {}
        for cid, ch, task_id, idx, type_tag, value, task_path in rows:
            by_cid.setdefault((ch, cid), []).append((task_path, task_id, idx, type_tag, value))
        found: dict[str, list[PendingWrite]] = {}
        for ch in channels:
            collected: list[PendingWrite] = []
            for cid in reversed(chain[ch]):
                mine = written.get(cid, {})
                for _path, task_id, idx, type_tag, value in sorted(by_cid.get((ch, cid), ()),
                                                                  key=lambda w: writes_sort_key(w[0], w[1], w[2])):
                    hit = (task_id, idx, ch)
                    collected.append((task_id, ch, mine[hit] if hit in mine else self.serde.loads_typed((type_tag, value))))
            found[ch] = collected
        return found

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints and writes and record its tombstone, in one transaction (a run writing
        concurrently waits for SQLite's write lock and is refused after it)."""
        self._forget_histories(str(thread_id))
        with self.cursor() as cur:
            cur.execute(f"INSERT OR IGNORE INTO {TOMBSTONES} (thread_id) VALUES (?)", (str(thread_id),))
            cur.execute("DELETE FROM checkpoints WHERE thread_id = ?", (str(thread_id),))
            cur.execute("DELETE FROM writes WHERE thread_id = ?", (str(thread_id),))

    def is_deleted(self, thread_id: str) -> bool:
        """Was ``thread_id`` deleted?"""
        with self.cursor(transaction=False) as cur:
            cur.execute(f"SELECT 1 FROM {TOMBSTONES} WHERE thread_id = ?", (str(thread_id),))
            return cur.fetchone() is not None


def _copied(history: DeltaChannelHistory) -> DeltaChannelHistory:
    """A new history dict and writes list around the same seed and written values."""
    out: DeltaChannelHistory = {"writes": list(history["writes"])}
    if "seed" in history:
        out["seed"] = history["seed"]
    return out
