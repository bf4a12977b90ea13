"""``switchboard serve``: a thin launcher of an existing LangGraph-API engine over one PostgreSQL database.

Nothing here speaks HTTP for the desk: the engine serves LangGraph's API (threads, runs, interrupts, resume) for
``graph.service.server:graph`` with the authentication of ``graph/service/auth.py``; this module only

1. checks the configuration (a ``postgresql://`` database, the engine installed, free ports),
2. migrates once — our stores (``graph.app.db_cli.upgrade_all``: business store, event log, checkpoints) and the
   engine's own tables — so that N instances starting together do not race on migrations,
3. starts N engine processes on consecutive ports (``port``, ``port + 1``, …), one after the other (each
   registers the engine's default assistant at startup, which races), each told where every store is
   (``SWITCHBOARD_DB``, the engine's ``DATABASE_URL``), and waits until each answers its health route,
4. restarts an instance that dies (e.g. SIGKILL) and stops them all on Ctrl-C / SIGTERM (SIGTERM to each, SIGKILL
   after :data:`STOP_GRACE_S` seconds),
5. on Aegra, marks the runs a dead instance left ``pending`` / ``running`` as ``error`` (:func:`sweep_orphaned_runs`,
   at start, after each restart and every :data:`SWEEP_EVERY_S` seconds). Aegra 0.6 has no sweeper of its own: a run
   record whose process was killed stayed ``running`` for good, and its thread ``busy`` (which refuses a resume).
   The turn itself is not lost: its checkpoints are in the database, and the customer's next message
   (``graph.cut_turns``) or ``switchboard recover`` finishes it. langgraph-pg's runtime keeps its own run queue
   (heartbeats, retries) and is left to it.

Engines (:data:`ENGINES`):

* ``aegra`` (default) — Aegra 0.6 (Apache-2.0; ``pip install 'switchboard[serve]'``), run with uvicorn from a folder
  of its own under ``$SWITCHBOARD_HOME/serve`` (Aegra reads ``./alembic.ini`` from its working directory; its
  generated ``aegra.json`` names our graph and auth by absolute path).
* ``langgraph-pg`` — LangGraph's own Agent Server (``langgraph-api``, **Elastic License 2.0**: the user's choice, not
  our default) on the MIT PostgreSQL + Redis runtime ``langgraph-runtime-pg``, started with its ``langhost serve``.
  langgraph-runtime-pg 0.11.1.post1 (the only release) pins ``langgraph-api==0.11.1``, while ``make studio`` uses
  ``langgraph-cli[inmem]`` with langgraph-api 0.16: the two cannot share one environment, so this engine runs from a
  virtual environment of its own (``make langgraph-pg`` makes ``.venv-langgraph-pg``; ``--engine-venv`` or
  ``SWITCHBOARD_ENGINE_VENV`` point elsewhere). Every instance shares the database and one Redis (``--redis`` /
  ``REDIS_URI``, default ``redis://127.0.0.1:6379/0``): a run created on one instance may be executed by another's
  worker, as that runtime is built to do.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graph.contracts.errors import ConfigError, InfrastructureError
from graph.contracts.settings import home_dir, is_postgres

__all__ = ["ENGINES", "EngineSpec", "STOP_GRACE_S", "READY_TIMEOUT_S", "Instance", "Launcher", "engine_config",
           "langgraph_config", "engine_venv", "sweep_orphaned_runs", "ORPHAN_GRACE_S", "SWEEP_EVERY_S", "ORPHAN_ERROR"]


@dataclass(frozen=True)
class EngineSpec:
    """What the launcher needs to know about an engine: ``licence``, ``install`` (the command that installs it),
    ``health`` (the path that answers 200 once an instance is up), ``separate`` (True when the engine runs from a
    virtual environment of its own rather than this interpreter's)."""

    licence: str
    install: str
    health: str
    separate: bool = False


#: Engines the launcher knows (module doc).
ENGINES = {
    "aegra": EngineSpec("Apache-2.0", "pip install 'switchboard[serve]'  (aegra-api 0.6)", "/health"),
    "langgraph-pg": EngineSpec("Elastic-2.0 (langgraph-api); MIT (langgraph-runtime-pg, langhost)",
                               "make langgraph-pg  (a separate .venv-langgraph-pg with langhost==0.11.1.post1)",
                               "/ok", separate=True),
}
#: The MIT runtime's versions the launcher was built and tested with (the only release on PyPI at the time).
LANGGRAPH_PG_PINS = ("langhost==0.11.1.post1", "langgraph-runtime-pg==0.11.1.post1")
#: Background runs each langgraph-pg instance executes at once (langhost's ``--n-jobs-per-worker``; its default, 1,
#: would run one turn at a time per instance).
LANGGRAPH_PG_JOBS = 10
#: Default Redis of the langgraph-pg engine (env ``REDIS_URI`` wins).
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
#: Seconds an instance may take to stop after SIGTERM before it is killed.
STOP_GRACE_S = 10.0
#: Seconds an instance may take to answer its health route after it was started.
READY_TIMEOUT_S = 90.0
#: An instance that dies is restarted after this pause (seconds), so a crash loop does not spin.
RESTART_PAUSE_S = 1.0
#: Seconds since its last status change before a ``pending`` / ``running`` Aegra run whose thread is not held by any
#: run (``nodes.thread_guard.ThreadRunGuard`` holds the thread's advisory lock for the whole of a run of the graph)
#: counts as left behind by a dead instance. Only the moments between Aegra's status update and the graph taking the
#: lock (and back) are unlocked in a live run: well under a second, seconds on a loaded machine.
ORPHAN_GRACE_S = 15.0
#: Seconds between two sweeps of left-behind runs while the launcher watches its instances.
SWEEP_EVERY_S = 5.0
#: The error message of a run marked by the sweep.
ORPHAN_ERROR = ("the instance running this run stopped before it finished; its turn is finished by the customer's next "
                "message or `switchboard recover THREAD`")


@dataclass
class Instance:
    """One engine process: its index, port and ``subprocess.Popen`` (None before start)."""

    index: int
    port: int
    proc: Any = None
    restarts: int = 0


@dataclass
class Launcher:
    """Starts, watches and stops N instances of an engine. See the module doc.

    Args:
        engine: a key of :data:`ENGINES`.
        db: the ``postgresql://`` URL every store and the engine use.
        instances: how many engine processes (>= 1).
        port: the first port; instance ``i`` listens on ``port + i``.
        host: the interface to bind (default loopback).
        say: where progress lines go (default ``print``).
        venv: the virtual environment of a ``separate`` engine (default :func:`engine_venv`).
        redis: the Redis URL of the langgraph-pg engine (default ``REDIS_URI``, else :data:`DEFAULT_REDIS`).
    """

    engine: str
    db: str
    instances: int = 1
    port: int = 2024
    host: str = "127.0.0.1"
    say: Callable[[str], None] = print
    procs: list[Instance] = field(default_factory=list)
    venv: Path | None = None
    redis: str = ""

    def check(self) -> None:
        """Refuse a bad configuration before anything starts. Raises ConfigError."""
        if self.engine not in ENGINES:
            raise ConfigError(f"unknown engine {self.engine!r}; use one of: {', '.join(ENGINES)}")
        if not is_postgres(self.db):
            raise ConfigError("switchboard serve needs --db postgresql://… (or SWITCHBOARD_DB): every instance must "
                              "share one database")
        if not 1 <= self.instances <= 16:
            raise ConfigError(f"--instances must be between 1 and 16 (got {self.instances})")
        if not 1024 <= self.port <= 65535 - self.instances:
            raise ConfigError(f"--port must leave room for {self.instances} consecutive ports (got {self.port})")
        if self.engine == "langgraph-pg":
            self._check_langgraph_pg()
        else:
            import importlib.util

            if importlib.util.find_spec("aegra_api") is None:
                raise ConfigError(f"engine aegra is not installed: {ENGINES['aegra'].install}")
        for i in range(self.instances):
            with socket.socket() as s:
                if s.connect_ex((self.host, self.port + i)) == 0:
                    raise ConfigError(f"port {self.port + i} on {self.host} is already in use")

    def _check_langgraph_pg(self) -> None:
        """The separate environment holds langhost, the runtime and switchboard; Redis answers. Raises ConfigError."""
        self.venv = self.venv or engine_venv()
        python = self.venv / "bin" / "python"
        if not python.exists():
            raise ConfigError(f"engine langgraph-pg is not installed: no virtual environment at {self.venv} "
                              f"({ENGINES['langgraph-pg'].install}; or --engine-venv DIR)")
        probe = subprocess.run([str(python), "-c", "import importlib.util as u, sys; sys.exit(0 if all(u.find_spec(m) "
                                "for m in ('langhost', 'langgraph_runtime_pg', 'graph.service.server')) else 1)"],
                               capture_output=True, timeout=60)
        if probe.returncode != 0:
            raise ConfigError(f"engine langgraph-pg: {self.venv} lacks langhost, langgraph-runtime-pg or switchboard "
                              f"({ENGINES['langgraph-pg'].install})")
        self.redis = self.redis or os.environ.get("REDIS_URI") or DEFAULT_REDIS
        from urllib.parse import urlsplit

        where = urlsplit(self.redis)
        try:
            with socket.create_connection((where.hostname or "127.0.0.1", where.port or 6379), timeout=3):
                pass
        except OSError as exc:
            raise ConfigError(f"engine langgraph-pg needs Redis: {self.redis} does not answer ({exc.strerror or exc}); "
                              "give --redis URL or REDIS_URI") from None

    @property
    def run_dir(self) -> Path:
        """The engine's working directory: ``$SWITCHBOARD_HOME/serve/<engine>``."""
        return home_dir().absolute() / "serve" / self.engine

    def env(self) -> dict[str, str]:
        """The environment of an instance: ours plus where the stores are."""
        from checkpoints.postgres import libpq_url

        url = libpq_url(self.db)
        env = {**os.environ, "SWITCHBOARD_DB": url, "LOG_LEVEL": os.environ.get("LOG_LEVEL", "WARNING"),
               "PYTHONUNBUFFERED": "1"}
        if self.engine == "langgraph-pg":
            # migrations ran once in migrate(); no version check or analytics call from a launched server
            return {**env, "DATABASE_URI": url, "REDIS_URI": self.redis, "LG_RUNTIME_PG_AUTO_MIGRATE": "false",
                    "LANGGRAPH_NO_VERSION_CHECK": "true", "LANGGRAPH_CLI_NO_ANALYTICS": "1",
                    "N_JOBS_PER_WORKER": str(LANGGRAPH_PG_JOBS),
                    **{k: os.environ.get(k, v) for k, v in LANGGRAPH_ENV.items()}}
        return {**env, "DATABASE_URL": url, "AEGRA_CONFIG": str(self.run_dir / "aegra.json")}

    def migrate(self) -> None:
        """Our stores, then the engine's tables, once. Raises InfrastructureError when the engine's fail."""
        from graph.app.db_cli import upgrade_all

        out = upgrade_all(self.db)
        self.say(f"stores ready (business store at revision {out['business']})")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.engine == "langgraph-pg":
            assert self.venv is not None  # set by check()
            (self.run_dir / "langgraph.json").write_text(json.dumps(langgraph_config(), indent=2) + "\n")
            cmd = [str(self.venv / "bin" / "langgraph-runtime-pg-migrate"), "upgrade"]
        else:
            (self.run_dir / "aegra.json").write_text(json.dumps(engine_config(), indent=2) + "\n")
            cmd = [sys.executable, "-c", "from aegra_api.core.migrations import run_migrations; run_migrations()"]
        done = subprocess.run(cmd, cwd=self.run_dir, env=self.env(), capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise InfrastructureError(f"the {self.engine} migrations failed: {last}")
        if self.engine == "aegra":
            self._engine_thread_tombstones()
        self.say(f"{self.engine} tables ready")

    def _engine_thread_tombstones(self) -> None:
        """A thread Aegra deletes stays deleted: its checkpoints go and later writes are refused
        (``checkpoints.postgres_saver.install_engine_thread_tombstones``). Raises InfrastructureError."""
        import psycopg

        from checkpoints.postgres import SETUP_KEY_ENGINE, advisory_lock, libpq_url, redacted
        from checkpoints.postgres_saver import install_engine_thread_tombstones

        try:
            with advisory_lock(self.db, SETUP_KEY_ENGINE, 60.0, "the engine's tables are being migrated elsewhere"), \
                    psycopg.connect(libpq_url(self.db), autocommit=True, connect_timeout=10) as conn:
                install_engine_thread_tombstones(conn)
        except psycopg.Error as exc:
            raise InfrastructureError(f"PostgreSQL at {redacted(self.db)} failed: {str(exc).strip()}") from None

    def command(self, inst: Instance) -> list[str]:
        """The command line of instance ``inst``."""
        if self.engine == "langgraph-pg":
            assert self.venv is not None
            return [str(self.venv / "bin" / "langhost"), "serve", "--config", str(self.run_dir / "langgraph.json"),
                    "--host", self.host, "--port", str(inst.port), "--database-uri", self.env()["DATABASE_URI"],
                    "--redis-uri", self.redis, "--n-jobs-per-worker", str(LANGGRAPH_PG_JOBS),
                    "--server-log-level", "WARNING"]
        return [sys.executable, "-m", "uvicorn", "aegra_api.main:app", "--host", self.host, "--port", str(inst.port),
                "--no-access-log"]

    def start(self, inst: Instance) -> None:
        """Start (or restart) one instance; its output goes to ``run_dir/instance-<i>.log``."""
        log = open(self.run_dir / f"instance-{inst.index}.log", "ab")  # owned by the child's lifetime
        inst.proc = subprocess.Popen(self.command(inst), cwd=self.run_dir, env=self.env(), stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def wait_ready(self, inst: Instance) -> None:
        """Wait until the instance answers ``/health``. Raises InfrastructureError when it exits or times out."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        url = f"http://{self.host}:{inst.port}{ENGINES[self.engine].health}"
        while time.monotonic() < deadline:
            if inst.proc.poll() is not None:
                raise InfrastructureError(f"instance {inst.index} exited with code {inst.proc.returncode}; see "
                                          f"{self.run_dir / f'instance-{inst.index}.log'}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:  # loopback URL we built
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise InfrastructureError(f"instance {inst.index} did not answer {url} within {READY_TIMEOUT_S:g} s")

    def up(self) -> None:
        """check, migrate, start every instance and wait until all answer. Raises ConfigError/InfrastructureError
        (then every instance already started is stopped)."""
        self.check()
        self.migrate()
        self.sweep()
        self.procs = [Instance(i, self.port + i) for i in range(self.instances)]
        try:
            for inst in self.procs:  # one after the other: Aegra registers its default assistant at startup (races)
                self.start(inst)
                self.wait_ready(inst)
                self.say(f"instance {inst.index}: http://{self.host}:{inst.port} (pid {inst.proc.pid})")
        except BaseException:
            self.stop()
            raise
        self._write_pids()

    def _write_pids(self) -> None:
        """``run_dir/instances.json``: index, port and pid of each instance (replaced atomically)."""
        tmp = self.run_dir / "instances.json.tmp"
        tmp.write_text(json.dumps([{"index": i.index, "port": i.port, "pid": i.proc.pid} for i in self.procs]) + "\n")
        tmp.replace(self.run_dir / "instances.json")

    def sweep(self) -> int:
        """Mark the Aegra runs dead instances left behind (:func:`sweep_orphaned_runs`); print each. Returns how many.
        A database fault is printed on one line and the sweep tried again later (it never stops the launcher)."""
        if self.engine != "aegra":
            return 0
        try:
            marked = sweep_orphaned_runs(self.db)
        except InfrastructureError as exc:
            self.say(f"sweep of left-behind runs skipped: {exc}")
            return 0
        for run_id, thread_id, status in marked:
            self.say(f"run {run_id} on thread {thread_id} was left running by a stopped instance: marked error "
                     f"(thread {status}); its turn is finished by the next message or `switchboard recover {thread_id}`")
        return len(marked)

    def watch(self, should_stop: Callable[[], bool]) -> None:
        """Until ``should_stop()``: restart any instance that died (each restart printed and counted), and sweep the
        runs dead instances left behind every :data:`SWEEP_EVERY_S` seconds."""
        next_sweep = time.monotonic() + SWEEP_EVERY_S
        while not should_stop():
            if time.monotonic() >= next_sweep:
                self.sweep()
                next_sweep = time.monotonic() + SWEEP_EVERY_S
            for inst in self.procs:
                if inst.proc.poll() is not None and not should_stop():
                    code = inst.proc.returncode
                    self.say(f"instance {inst.index} exited ({_exit_text(code)}); restarting")
                    time.sleep(RESTART_PAUSE_S)
                    inst.restarts += 1
                    self.start(inst)
                    try:
                        self.wait_ready(inst)
                    except InfrastructureError as exc:
                        self.say(f"instance {inst.index}: {exc}")
                        continue
                    self.say(f"instance {inst.index}: back on port {inst.port} (pid {inst.proc.pid})")
                    self._write_pids()
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM every running instance, SIGKILL those still running after :data:`STOP_GRACE_S` seconds."""
        alive = [i.proc for i in self.procs if i.proc is not None and i.proc.poll() is None]
        for p in alive:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for p in alive:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def sweep_orphaned_runs(db: str, grace_s: float = ORPHAN_GRACE_S) -> list[tuple[str, str, str]]:
    """Mark as ``error`` (:data:`ORPHAN_ERROR`) every Aegra run (table ``runs``) still ``pending`` / ``running`` whose
    last status change is more than ``grace_s`` seconds old and whose thread's advisory lock
    (``checkpoints.postgres.advisory_key("switchboard-thread", thread_id)``) is free: no process runs the graph on
    that thread, so the process that ran it is gone. The lock is held while the run is marked, so no run of that
    thread starts meanwhile. Its thread's Aegra status becomes ``interrupted`` when the thread's checkpoint waits for
    an approval (Aegra resumes only such threads), else ``idle``, unless another run of it is still in flight.

    Returns ``[(run_id, thread_id, new thread status)]``; ``[]`` when the database has no Aegra tables. Raises
    InfrastructureError when the server cannot be reached."""
    import psycopg

    from checkpoints.postgres import advisory_key, libpq_url, redacted

    try:
        with psycopg.connect(libpq_url(db), autocommit=True, connect_timeout=10) as conn:
            if conn.execute("SELECT to_regclass('runs') IS NOT NULL AND to_regclass('thread') IS NOT NULL"
                            ).fetchone() != (True,):
                return []
            rows = conn.execute("SELECT run_id, thread_id FROM runs WHERE status IN ('pending', 'running') "
                                "AND updated_at < now() - make_interval(secs => %s) ORDER BY updated_at",
                                (grace_s,)).fetchall()
            marked = []
            for run_id, thread_id in rows:
                key = advisory_key("switchboard-thread", str(thread_id))
                if not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:  # type: ignore[index]
                    continue  # a run of the graph holds the thread: alive
                try:
                    with conn.transaction():
                        done = conn.execute("UPDATE runs SET status = 'error', error_message = %s, updated_at = now() "
                                            "WHERE run_id = %s AND status IN ('pending', 'running')",
                                            (ORPHAN_ERROR, run_id))
                        if done.rowcount != 1:
                            continue
                        status = "interrupted" if _waits_for_approval(db, str(thread_id)) else "idle"
                        conn.execute("UPDATE thread SET status = %s, updated_at = now() WHERE thread_id = %s "
                                     "AND NOT EXISTS (SELECT 1 FROM runs WHERE thread_id = %s "
                                     "AND status IN ('pending', 'running'))", (status, thread_id, thread_id))
                    marked.append((str(run_id), str(thread_id), status))
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            return marked
    except psycopg.Error as exc:
        raise InfrastructureError(f"PostgreSQL at {redacted(db)} failed: {str(exc).strip()}") from None


def _waits_for_approval(db: str, thread_id: str) -> bool:
    """Does the thread's latest checkpoint (LangGraph's tables in ``db``) have a pending interrupt?"""
    import psycopg

    from checkpoints.postgres import libpq_url

    with psycopg.connect(libpq_url(db), autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT EXISTS (SELECT 1 FROM checkpoint_writes w WHERE w.thread_id = %s "
                           "AND w.checkpoint_ns = '' AND w.channel = '__interrupt__' AND w.checkpoint_id = "
                           "(SELECT max(checkpoint_id) FROM checkpoints c WHERE c.thread_id = %s "
                           "AND c.checkpoint_ns = ''))", (thread_id, thread_id)).fetchone()
    return bool(row and row[0])


def _exit_text(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def engine_config() -> dict[str, Any]:
    """The ``aegra.json`` the launcher writes: our graph, authentication and run guard (``graph.service.aegra_app``) by
    absolute file path or module (the folder it is written to is not the repository)."""
    here = Path(__file__).resolve().parent
    return {"graphs": {"switchboard": f"{here / 'server.py'}:graph"}, "auth": {"path": f"{here / 'auth.py'}:auth"},
            "http": {"app": "graph.service.aegra_app:app"}}


#: The ``http`` and ``env`` sections of every ``langgraph.json`` (the repository's and the one the launcher writes):
#: the customer's view on every response (``graph.service.view_guard``), and no way in that would bypass it — the MCP and A2A
#: endpoints and the LangGraph API's v2 event streaming (its WebSocket and ``/threads/{id}/commands``) are switched
#: off. ``FF_V2_EVENT_STREAMING`` is an environment flag (``http`` has no key for it); an environment that sets it
#: itself wins.
LANGGRAPH_HTTP: dict[str, Any] = {"app": "graph.service.view_guard:app", "disable_mcp": True, "disable_a2a": True}
LANGGRAPH_ENV: dict[str, str] = {"FF_V2_EVENT_STREAMING": "false"}


def langgraph_config() -> dict[str, Any]:
    """The ``langgraph.json`` the launcher writes for langgraph-pg: our graph and authentication by absolute path (the
    folder it is written to is not the repository); ``disable_studio_auth``, ``http`` and ``env`` as in the
    repository's own file (:data:`LANGGRAPH_HTTP`, :data:`LANGGRAPH_ENV`)."""
    here = Path(__file__).resolve().parent
    return {"dependencies": ["."], "graphs": {"switchboard": f"{here / 'server.py'}:graph"},
            "auth": {"path": f"{here / 'auth.py'}:auth", "disable_studio_auth": True},
            "http": dict(LANGGRAPH_HTTP), "env": dict(LANGGRAPH_ENV)}


def engine_venv() -> Path:
    """Where the langgraph-pg engine's virtual environment is: ``SWITCHBOARD_ENGINE_VENV``, else
    ``.venv-langgraph-pg`` in the current folder if it exists, else the one beside this package's checkout (where
    ``make langgraph-pg`` puts it)."""
    given = os.environ.get("SWITCHBOARD_ENGINE_VENV")
    if given:
        return Path(given).expanduser().absolute()
    here = Path.cwd() / ".venv-langgraph-pg"
    return here.absolute() if here.exists() else Path(__file__).resolve().parents[2] / ".venv-langgraph-pg"


def serve(engine: str, db: str, instances: int, port: int, host: str, say: Callable[[str], None] = print,
          venv: Path | None = None, redis: str = "") -> None:
    """Run the launcher in the foreground until SIGINT/SIGTERM; see :class:`Launcher`."""
    launcher = Launcher(engine, db, instances, port, host, say, venv=venv, redis=redis)
    stopping: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stopping.append(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        launcher.up()
        say(f"serving {instances} instance(s) of {engine}; Ctrl-C stops them")
        launcher.watch(lambda: bool(stopping))
    finally:
        launcher.stop()
        for s, h in old.items():
            signal.signal(s, h)
    say("stopped")
