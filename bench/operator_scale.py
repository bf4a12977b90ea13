"""Operator commands on a large home: ``switchboard threads`` (the table of the first page, and ``--json`` of every
thread), ``pending``, ``stats`` and ``stats --edges`` on homes of 1,000 and 10,000 threads, each command a new
process, against a bare read of each thread's latest checkpoint through LangGraph's own saver (``get_tuple`` per
thread, also a new process).

Figures: CPU seconds of the child process (user + system, ``os.wait4``: the machine is shared, so CPU, not wall),
its peak RSS, and each command's CPU / the bare read's. On PostgreSQL the server's own CPU is not in these figures
(only the client's; the bare read's client is LangGraph's ``PostgresSaver``).

The home is built fast and representative: a few real conversations run through the desk (offline model, keyword
router) into a template home (an answered billing question with a follow-up, a refund paused for approval, a card
question with a follow-up, and one of another tenant, whose threads the operator must not count), then their rows
(checkpoints, pending writes and events, as the saver and the event log wrote them) are copied by the database to
``N`` threads (``INSERT … SELECT``; new thread, checkpoint, run, task and event ids per copy). The home's size and
event count are printed with the figures.

Target (the scoreboard's): ``threads``, ``pending``, ``stats`` <= 1.5x the bare read at 10,000 threads, RSS flat in the
number of events.

Usage: ``python bench/operator_scale.py [--threads 1000 10000] [--runs 2] [--postgres URL] [--postgres-threads N…]
[--json FILE]``;
``--postgres`` (default: ``$SWITCHBOARD_BENCH_POSTGRES``, else ``$SWITCHBOARD_TEST_POSTGRES``) also builds the
homes on that server (a database of their own, dropped afterwards; by default only the largest size).
``SWITCHBOARD_BENCH_SMOKE=1``: 40 threads, one run (tests/scenarios/test_bench_scripts.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import closing
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, SMOKE, load_average, write_json

#: The template conversations: (thread, customer, tenant, messages).
TEMPLATES = (
    ("tpl-0", "c_ada", "t_demo", ("I was charged twice for my coffee", "thanks, and when will I see it back?")),
    ("tpl-1", "c_ada", "t_demo", ("I want a refund for tx_1001 please, that Tesco order never happened",)),
    ("tpl-2", "c_ada", "t_demo", ("where is my card?", "it never arrived, can you send a new one?", "thanks")),
    ("tpl-3", "c_zed", "t_other", ("where is my card?",)),
)

BARE_SQLITE = """
import sqlite3, sys, time
from langgraph.checkpoint.sqlite import SqliteSaver
conn = sqlite3.connect(sys.argv[1], check_same_thread=False)
saver = SqliteSaver(conn)
ids = [r[0] for r in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")]
t0 = time.process_time()
n = sum(1 for t in ids if saver.get_tuple({"configurable": {"thread_id": t, "checkpoint_ns": ""}}) is not None)
print(n, time.process_time() - t0)
"""

BARE_POSTGRES = """
import sys, time
from psycopg import connect
from psycopg.rows import dict_row
from langgraph.checkpoint.postgres import PostgresSaver
conn = connect(sys.argv[1], autocommit=True, prepare_threshold=0, row_factory=dict_row)
saver = PostgresSaver(conn)
ids = [r["thread_id"] for r in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")]
t0 = time.process_time()
n = sum(1 for t in ids if saver.get_tuple({"configurable": {"thread_id": t, "checkpoint_ns": ""}}) is not None)
print(n, time.process_time() - t0)
"""

#: The commands measured: name -> arguments after ``switchboard``.
COMMANDS = {
    "threads (first page)": ["threads"],
    "threads --json (all)": ["threads", "--json"],
    "pending": ["pending"],
    "stats": ["stats"],
    "stats --edges": ["stats", "--edges"],
}


def _child(cmd: list[str], env: dict, capture: bool = False) -> tuple[float, int, str]:
    """(CPU seconds user+system, peak RSS kB, stdout if ``capture``) of one child process (``os.wait4``: its own
    rusage); exits on a failure."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, env=env, stdout=out if capture else subprocess.DEVNULL, stderr=err,
                             cwd=env.get("PYTHONPATH", REPO))  # -m finds the package in its working folder first
        _, status, ru = os.wait4(p.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        p.returncode = code
        if code != 0:
            err.seek(0)
            raise SystemExit(f"error: {' '.join(cmd[:4])}… exited {code}: {err.read().decode()[-400:]}")
        out.seek(0)
        return ru.ru_utime + ru.ru_stime, int(ru.ru_maxrss), out.read().decode() if capture else ""


def build_template(home: Path, db: str) -> None:
    """Run :data:`TEMPLATES` through the desk into ``db`` (and the business store of ``home`` or of ``db``), with an
    operator ``ann`` (agent, approver) of t_demo."""
    from checkpoints import open_checkpointer
    from checkpoints.business import open_store
    from graph.builder import build_desk
    from graph.contracts.context import RunContext
    from graph.contracts.settings import Settings
    from graph.conversation import Conversation
    from nodes.embedded.offline_model import OfflineChatModel
    from nodes.testing.scripted import KeywordRouter

    os.environ["SWITCHBOARD_HOME"] = str(home)
    settings = Settings.from_env(db=db)
    store = open_store(settings.business_db)
    if store.get_customer("c_zed") is None:
        store.insert_rows({"customers": [{"id": "c_zed", "tenant_id": "t_other", "name": "Zed",
                                          "email": "z@example.org", "flags": "{}"}]})
    for name in ("ann",):
        if store.get_operator(name) is None:
            store.add_operator(name, "t_demo", ["agent", "approver"])
    router = KeywordRouter()
    desk = build_desk(model=OfflineChatModel(router=router), checkpointer=open_checkpointer(settings.db),
                      settings=settings, router=router, store=store)
    for thread, customer, tenant, messages in TEMPLATES:
        conv = Conversation(thread, desk=desk, context=RunContext(user_id=customer, tenant_id=tenant))
        for text in messages:
            conv.send(text)


def _template_in_child(home: Path, db: str) -> None:
    """:func:`build_template` in a process of its own: this process stays small, since a child's peak RSS
    (``ru_maxrss``) counts the parent's pages it was forked with, before its ``exec``."""
    subprocess.run([sys.executable, __file__, "--build-template", str(home), db], check=True, cwd=REPO,
                   env={**os.environ, "PYTHONPATH": str(REPO)})


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


#: How a copy ``i`` rewrites a column (SQLite ``printf`` / PostgreSQL ``lpad`` of the copy's number): new thread,
#: checkpoint, run, task and event ids; every other column is copied as it is.
_SQLITE_MAP = {
    "thread_id": "printf('s%06d', n.i)",
    "checkpoint_id": "printf('%06d.', n.i) || t.checkpoint_id",
    "parent_checkpoint_id": "CASE WHEN t.parent_checkpoint_id IS NULL THEN NULL ELSE printf('%06d.', n.i) || "
                            "t.parent_checkpoint_id END",
    "event_key": "printf('%06d', n.i) || t.event_key",
    "run_id": "CASE WHEN t.run_id IS NULL THEN NULL ELSE printf('%06d.', n.i) || t.run_id END",
    "task_id": "CASE WHEN t.task_id IS NULL THEN NULL ELSE printf('%06d.', n.i) || t.task_id END",
}


def clone_sqlite(path: Path, threads: int) -> None:
    """Copy the template threads of the SQLite file ``path`` to ``threads`` threads ``s000000``… (round robin over
    the templates; the last template, another tenant's, every 10th copy), then drop the templates."""
    conn = sqlite3.connect(path)
    tpl = [t[0] for t in TEMPLATES]
    # copy i takes template (i % 10 == 9 -> the other tenant's, else i % 3 of t_demo's)
    pick = f"CASE WHEN n.i % 10 = 9 THEN '{tpl[3]}' ELSE 'tpl-' || (n.i % 3) END"
    numbers = f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {threads - 1}) "
    for table in ("checkpoints", "writes", "events"):
        cols = [c for c in _columns(conn, table) if c != "id"]
        # writes.task_id is LangGraph's task id (copied as it is); events.task_id is ours (made unique per copy)
        exprs = ", ".join(f"t.{c}" if (c == "task_id" and table != "events") else _SQLITE_MAP.get(c, f"t.{c}")
                          for c in cols)
        conn.execute(f"{numbers}INSERT INTO {table} ({', '.join(cols)}) SELECT {exprs} FROM n JOIN {table} t "
                     f"ON t.thread_id = {pick}")
        conn.execute(f"DELETE FROM {table} WHERE thread_id LIKE 'tpl-%'")
    conn.commit()
    conn.execute("VACUUM")
    conn.close()


def clone_postgres(url: str, threads: int) -> None:
    """:func:`clone_sqlite` on PostgreSQL (tables of ``PostgresSaver`` and the event log)."""
    import psycopg

    from checkpoints.postgres import libpq_url

    tpl = [t[0] for t in TEMPLATES]
    pick = f"CASE WHEN g % 10 = 9 THEN '{tpl[3]}' ELSE 'tpl-' || (g % 3) END"
    num = "lpad(g::text, 6, '0')"
    remap = {"thread_id": f"'s' || {num}", "checkpoint_id": f"{num} || '.' || t.checkpoint_id",
             "parent_checkpoint_id": f"CASE WHEN t.parent_checkpoint_id IS NULL THEN NULL ELSE {num} || '.' || "
                                     "t.parent_checkpoint_id END",
             "event_key": f"{num} || t.event_key",
             "run_id": f"CASE WHEN t.run_id IS NULL THEN NULL ELSE {num} || '.' || t.run_id END",
             "task_id": f"CASE WHEN t.task_id IS NULL THEN NULL ELSE {num} || '.' || t.task_id END"}
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "events"):
            cols = [r[0] for r in conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = "
                                               "%s ORDER BY ordinal_position", (table,)) if r[0] != "id"]
            # checkpoint_writes.task_id is LangGraph's task id (copied); events.task_id is ours (made unique per copy)
            exprs = ", ".join(f"t.{c}" if (c == "task_id" and table != "events") else remap.get(c, f"t.{c}")
                              for c in cols)
            conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {exprs} FROM generate_series(0, "
                         f"{threads - 1}) g JOIN {table} t ON t.thread_id = {pick}")
            conn.execute(f"DELETE FROM {table} WHERE thread_id LIKE 'tpl-%%'")
        conn.execute("ANALYZE")


def _measure(env: dict, db: str, bare: str, runs: int) -> dict:
    """Median CPU and peak RSS of the bare read and of each command of :data:`COMMANDS` on ``db``, runs taking
    turns; ``vs_bare_read``: a command's CPU / the bare read process's; ``vs_bare_loop``: / the CPU of the bare
    read's loop alone (``get_tuple`` per thread, without the interpreter's start-up and imports)."""
    sb = [sys.executable, "-m", "graph.app.cli"]
    cpu: dict[str, list[float]] = {"bare read": []}
    rss: dict[str, list[int]] = {"bare read": []}
    loop: list[float] = []
    for _ in range(runs):
        c, r, out = _child([sys.executable, "-c", bare, db], env, capture=True)
        cpu["bare read"].append(c)
        rss["bare read"].append(r)
        loop.append(float(out.split()[1]))
        for name, args in COMMANDS.items():
            c, r, _ = _child([*sb, *args, "--as", "ann", "--db", db], env)
            cpu.setdefault(name, []).append(c)
            rss.setdefault(name, []).append(r)
    base, base_loop = statistics.median(cpu["bare read"]), statistics.median(loop)
    out = {name: {"cpu_s": round(statistics.median(v), 3), "peak_rss_mb": round(max(rss[name]) / 1024, 1),
                  "vs_bare_read": round(statistics.median(v) / base, 2) if base else None,
                  "vs_bare_loop": round(statistics.median(v) / base_loop, 2) if base_loop else None}
           for name, v in cpu.items()}
    out["bare read"]["loop_cpu_s"] = round(base_loop, 3)
    return out


def _sqlite_home(root: Path, threads: int, template: Path) -> tuple[Path, dict]:
    home = root / f"home-{threads}"
    home.mkdir()
    for name in ("switchboard.db", "business.db"):  # the backup API: what the WAL holds is copied too
        with closing(sqlite3.connect(template / name)) as src, closing(sqlite3.connect(home / name)) as dst:
            src.backup(dst)
    clone_sqlite(home / "switchboard.db", threads)
    conn = sqlite3.connect(home / "switchboard.db")
    events = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    conn.close()
    return home, {"threads": threads, "events": events,
                  "checkpoint_db_mb": round((home / "switchboard.db").stat().st_size / 1e6, 1)}


def _postgres_home(server: str, threads: int, root: Path) -> tuple[str, dict]:
    import psycopg

    name = f"sb_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = urlunsplit(urlsplit(server)._replace(path=f"/{name}"))
    home = root / f"pg-home-{threads}"
    home.mkdir()
    _template_in_child(home, url)
    clone_postgres(url, threads)
    with psycopg.connect(url) as conn:
        events = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    return url, {"threads": threads, "events": events, "database_mb": round(size / 1e6, 1), "_home": str(home),
                 "_name": name}


def _drop(server: str, name: str) -> None:
    import psycopg

    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[40] if SMOKE else [1000, 10000])
    ap.add_argument("--runs", type=int, default=1 if SMOKE else 2)
    ap.add_argument("--postgres-threads", type=int, nargs="+", default=None,
                    help="home sizes on PostgreSQL (default: the largest of --threads)")
    ap.add_argument("--postgres", default=os.environ.get("SWITCHBOARD_BENCH_POSTGRES")
                    or os.environ.get("SWITCHBOARD_TEST_POSTGRES"),
                    help="a PostgreSQL server URL: also measure homes there (a database of their own; default "
                         "$SWITCHBOARD_BENCH_POSTGRES, else $SWITCHBOARD_TEST_POSTGRES)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--code", type=Path, default=REPO, help="run the commands from this source tree (e.g. an "
                    "export of an earlier commit, for before/after figures; default: this one)")
    ap.add_argument("--build-template", nargs=2, metavar=("HOME", "DB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build_template:
        build_template(Path(args.build_template[0]), args.build_template[1])
        return 0
    root = Path(tempfile.mkdtemp(prefix="switchboard-opscale-"))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}, "COLUMNS": "150",
           "PYTHONPATH": str(args.code.resolve())}
    figures: dict = {"load_before": load_average(), "sqlite": {}, "postgres": {}}
    t0 = time.perf_counter()
    try:
        template = root / "template"
        template.mkdir()
        _template_in_child(template, str(template / "switchboard.db"))
        for n in args.threads:
            home, info = _sqlite_home(root, n, template)
            run_env = {**env, "SWITCHBOARD_HOME": str(home)}
            figures["sqlite"][str(n)] = {**info, "commands": _measure(run_env, str(home / "switchboard.db"),
                                                                       BARE_SQLITE, args.runs)}
            _print(f"SQLite, {n:,} threads ({time.perf_counter() - t0:.0f} s so far)", figures["sqlite"][str(n)])
            shutil.rmtree(home)
        for n in (args.postgres_threads or [max(args.threads)]) if args.postgres else []:
            url, info = _postgres_home(args.postgres, n, root)
            try:
                run_env = {**env, "SWITCHBOARD_HOME": info.pop("_home")}
                figures["postgres"][str(n)] = {**{k: v for k, v in info.items() if k != "_name"},
                                               "commands": _measure(run_env, url, BARE_POSTGRES, args.runs)}
                _print(f"PostgreSQL, {n:,} threads, client CPU ({time.perf_counter() - t0:.0f} s so far)",
                       figures["postgres"][str(n)])
            finally:
                _drop(args.postgres, info["_name"])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures["load_after"] = load_average()
    write_json(args.json, figures)
    return 0


def _print(title: str, f: dict) -> None:
    size = f.get("checkpoint_db_mb", f.get("database_mb"))
    print(f"\n{title}: {f['events']:,} events, {size} MB")
    print(f"  {'command':24} {'CPU s':>7} {'x bare':>7} {'x loop':>7} {'RSS MB':>7}")
    for name, c in f["commands"].items():
        print(f"  {name:24} {c['cpu_s']:7.3f} {c['vs_bare_read']:7.2f} {c['vs_bare_loop']:7.2f} {c['peak_rss_mb']:7.1f}")
    print(f"  (bare read: {f['commands']['bare read']['loop_cpu_s']:.3f} s CPU in its get_tuple loop)")


if __name__ == "__main__":
    sys.exit(main())
