"""Every storage fault is one ``error: …`` line naming the file and the cause, exit 2, no
traceback, and the business store is never re-created or re-seeded next to existing threads."""

from __future__ import annotations

import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoints.business.faults import MissingBusinessStore, require_business_store, storage_cause
from tests import storage_faults


def test_causes_are_named():
    assert storage_cause("file is not a database").startswith("corrupt (")
    assert storage_cause("database disk image is malformed").startswith("corrupt (")
    assert storage_cause("no such table: x") == "no such table: x"


def test_a_file_size_limit_is_named_as_disk_full(tmp_path):
    code = ("import resource, sys; from pathlib import Path; from checkpoints.business.faults import storage_cause;"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY));"
            f"print(storage_cause('disk I/O error', Path({str(tmp_path / 'b.db')!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=storage_faults.REPO,
                         check=True).stdout
    assert out.startswith("file size limit of 4096 bytes reached: disk full")
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] == resource.RLIM_INFINITY  # the test process is untouched


def _checkpoints(path: Path, rows: int) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE checkpoints (thread_id TEXT)")
    conn.executemany("INSERT INTO checkpoints VALUES (?)", [("t",)] * rows)
    conn.commit()
    conn.close()


def test_a_missing_business_store_next_to_threads_is_refused(tmp_path):
    _checkpoints(tmp_path / "switchboard.db", 1)
    with pytest.raises(MissingBusinessStore, match="business.db is missing but the checkpoint database"):
        require_business_store(tmp_path / "business.db", tmp_path / "switchboard.db")
    assert not (tmp_path / "business.db").exists()


def test_an_empty_or_truncated_business_store_next_to_threads_is_refused(tmp_path):
    _checkpoints(tmp_path / "switchboard.db", 1)
    business = tmp_path / "business.db"
    business.write_bytes(b"")
    with pytest.raises(MissingBusinessStore, match=r"business.db is empty \(0 bytes\) but the checkpoint database"):
        require_business_store(business, tmp_path / "switchboard.db")
    business.write_bytes(b"SQLite format 3\x00")
    with pytest.raises(MissingBusinessStore, match=r"is truncated \(16 bytes"):
        require_business_store(business, tmp_path / "switchboard.db")
    assert business.read_bytes() == b"SQLite format 3\x00"  # nothing re-created or re-seeded
    business.unlink()
    sqlite3.connect(business).execute("CREATE TABLE customers (id TEXT)").connection.commit()
    require_business_store(business, tmp_path / "switchboard.db")  # a real database passes


def test_an_emptied_checkpoint_store_next_to_business_records_is_refused(tmp_path):
    """The reverse of the above: an emptied switchboard.db is not silently re-created next to refund tasks."""
    from checkpoints.business import open_store

    business, checkpoints = tmp_path / "business.db", tmp_path / "switchboard.db"
    store = open_store(business)
    checkpoints.write_bytes(b"")
    require_business_store(business, checkpoints)  # a seeded store with no thread yet: nothing to protect
    store.claim_thread_owner("a1", "c_ada", "t_demo")
    with pytest.raises(MissingBusinessStore, match=r"switchboard.db is empty \(0 bytes\) but the business database "
                                                   r".*business.db holds"):
        require_business_store(business, checkpoints)
    assert checkpoints.read_bytes() == b""  # nothing re-created
    checkpoints.unlink()
    require_business_store(business, checkpoints)  # a missing file is a new checkpoint database (--db may name one)


def test_a_new_home_may_create_the_business_store(tmp_path):
    require_business_store(tmp_path / "business.db", tmp_path / "switchboard.db")  # no checkpoints at all
    other = sqlite3.connect(tmp_path / "switchboard.db")
    other.execute("CREATE TABLE events (id TEXT)")  # only the event log so far
    other.commit()
    other.close()
    require_business_store(tmp_path / "business.db", tmp_path / "switchboard.db")
    _checkpoints(tmp_path / "switchboard.db", 0)
    require_business_store(tmp_path / "business.db", tmp_path / "switchboard.db")  # an empty checkpoint database
    require_business_store("postgresql://x@h/db", tmp_path / "switchboard.db")  # servers are not checked


@pytest.mark.slow
@pytest.mark.subprocess
def test_every_storage_fault_is_one_line_exit_2_without_traceback(tmp_path):
    outcomes = storage_faults.run_all(tmp_path)
    assert len(outcomes) == len(storage_faults.SCENARIOS) >= 24
    bad = [(o.name, o.code, o.last_line) for o in outcomes
           if o.traceback or o.code != 2 or o.reseeded or not o.last_line.startswith("error: ")
           or len(o.stderr.strip().splitlines()) != 1 or "database" not in o.last_line]
    assert bad == []
    causes = {o.name: o.last_line for o in outcomes}
    assert "corrupt" in causes["corrupt business.db: chat"] and "read-only" in causes["read-only home: chat"]
    assert "disk full" in causes["disk full (ulimit -f): chat"]
    assert "is missing" in causes["business.db deleted: resume"]
    assert "switchboard.db is empty (0 bytes)" in causes["switchboard.db emptied: chat"]
    assert "business.db" in causes["switchboard.db emptied: chat"]
    assert "read-only" in causes["read-only home: trace"] and "corrupt" in causes["corrupt switchboard.db: trace"]


@pytest.mark.subprocess
def test_disk_full_mid_turn_is_one_line_and_the_turn_is_recoverable(isolated_home):
    """A file-size limit reached while a turn writes its checkpoints prints exactly one error line (no
    "Error in _RunCallbacks.on_chain_error callback" from the event recorder), and the failed turn is either not
    stored or finished by ``recover``: history never shows the message without an answer."""
    import json
    import os

    env = {**os.environ, "SWITCHBOARD_HOME": str(isolated_home), "COLUMNS": "250"}
    env.pop("SWITCHBOARD_OPERATOR", None)

    def cli(*args: str, limit_kib: int | None = None) -> subprocess.CompletedProcess:
        cmd = " ".join(["exec", sys.executable, "-m", "graph.app.cli", *args])
        prefix = f"ulimit -f {limit_kib}; " if limit_kib else ""
        return subprocess.run(["bash", "-c", prefix + cmd], cwd=storage_faults.REPO, env=env, capture_output=True,
                              text=True, timeout=300)

    for step in (("operators", "add", "ida", "--tenant", "t_demo", "--role", "admin"),
                 ("operators", "add", "ann", "--tenant", "t_demo", "--role", "approver", "--as", "ida"),
                 ("chat", "hello", "--thread", "a1")):  # a home made as a user makes it
        assert cli(*step).returncode == 0
    conn = sqlite3.connect(isolated_home / "switchboard.db")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file: any growth hits the limit
    conn.close()
    size_kib = (isolated_home / "switchboard.db").stat().st_size // 1024
    full = cli("chat", "hello", "--thread", "a2", limit_kib=size_kib)
    lines = full.stderr.strip().splitlines()
    assert full.returncode == 2 and len(lines) == 1, full.stderr
    assert lines[0].startswith("error: checkpoint database") and "disk full" in lines[0], lines
    conn = sqlite3.connect(isolated_home / "switchboard.db")
    stored = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'a2'").fetchone()[0]
    conn.close()
    if stored:
        rec = cli("recover", "a2", "--as", "ann")
        assert rec.returncode == 0 and "a2: found an interrupted run; finished it" in rec.stdout, rec.stdout
        history = cli("history", "a2", "--as", "ann", "--json")
        [turn] = json.loads(history.stdout)
        assert turn["user"] == "hello" and turn["status"] == "answered" and turn["answer"], turn
