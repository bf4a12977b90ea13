"""``switchboard serve``: a thin launcher of an existing LangGraph-API engine over one PostgreSQL database.

Nothing here speaks HTTP for the desk: the engine serves LangGraph's API (threads, runs, interrupts, resume) for
``graph.server:graph`` with the authentication of ``graph/auth.py``; this module only

1. checks the configuration (a ``postgresql://`` database, the engine installed, free ports),
2. migrates once — our stores (``graph.db_cli.upgrade_all``: business store, event log, checkpoints) and the
   engine's own tables — so that N instances starting together do not race on migrations,
3. starts N engine processes on consecutive ports (``port``, ``port + 1``, …), one after the other (each
   registers the engine's default assistant at startup, which races), each told where every store is
   (``SWITCHBOARD_DB``, the engine's ``DATABASE_URL``), and waits until each answers its health route,
4. restarts an instance that dies (e.g. SIGKILL) and stops them all on Ctrl-C / SIGTERM (SIGTERM to each, SIGKILL
   after :data:`STOP_GRACE_S` seconds).

Engines (:data:`ENGINES`): ``aegra`` — Aegra 0.6 (Apache-2.0; ``pip install 'switchboard[serve]'``), run with
uvicorn from a folder of its own under ``$SWITCHBOARD_HOME/serve`` (Aegra reads ``./alembic.ini`` from its working
directory; its generated ``aegra.json`` names our graph and auth by absolute path).
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

from graph.errors import ConfigError, InfrastructureError
from graph.settings import home_dir, is_postgres

__all__ = ["ENGINES", "STOP_GRACE_S", "READY_TIMEOUT_S", "Instance", "Launcher", "engine_config"]

#: Engines the launcher knows, with the package that must be importable and how to install it.
ENGINES = {"aegra": ("aegra_api", "pip install 'switchboard[serve]'  (aegra-api 0.6, Apache-2.0)")}
#: Seconds an instance may take to stop after SIGTERM before it is killed.
STOP_GRACE_S = 10.0
#: Seconds an instance may take to answer its health route after it was started.
READY_TIMEOUT_S = 90.0
#: An instance that dies is restarted after this pause (seconds), so a crash loop does not spin.
RESTART_PAUSE_S = 1.0


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
    """

    engine: str
    db: str
    instances: int = 1
    port: int = 2024
    host: str = "127.0.0.1"
    say: Callable[[str], None] = print
    procs: list[Instance] = field(default_factory=list)

    def check(self) -> None:
        """Refuse a bad configuration before anything starts. Raises ConfigError."""
        if self.engine == "langgraph-pg":
            raise ConfigError("switchboard serve does not launch LangGraph's Agent Server (langgraph-api with the "
                              "PostgreSQL runtime, Elastic License 2.0, needs Redis): deploy langgraph.json as its "
                              "documentation says, with SWITCHBOARD_DB set to the same PostgreSQL; or use --engine aegra")
        if self.engine not in ENGINES:
            raise ConfigError(f"unknown engine {self.engine!r}; use one of: {', '.join(ENGINES)}")
        if not is_postgres(self.db):
            raise ConfigError("switchboard serve needs --db postgresql://… (or SWITCHBOARD_DB): every instance must "
                              "share one database")
        if not 1 <= self.instances <= 16:
            raise ConfigError(f"--instances must be between 1 and 16 (got {self.instances})")
        if not 1024 <= self.port <= 65535 - self.instances:
            raise ConfigError(f"--port must leave room for {self.instances} consecutive ports (got {self.port})")
        module, how = ENGINES[self.engine]
        import importlib.util

        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"engine {self.engine} is not installed: {how}")
        for i in range(self.instances):
            with socket.socket() as s:
                if s.connect_ex((self.host, self.port + i)) == 0:
                    raise ConfigError(f"port {self.port + i} on {self.host} is already in use")

    @property
    def run_dir(self) -> Path:
        """The engine's working directory: ``$SWITCHBOARD_HOME/serve/<engine>``."""
        return home_dir().absolute() / "serve" / self.engine

    def env(self) -> dict[str, str]:
        """The environment of an instance: ours plus where the stores are."""
        from checkpoints.postgres import libpq_url

        url = libpq_url(self.db)
        return {**os.environ, "SWITCHBOARD_DB": url, "DATABASE_URL": url,
                "AEGRA_CONFIG": str(self.run_dir / "aegra.json"), "LOG_LEVEL": os.environ.get("LOG_LEVEL", "WARNING"),
                "PYTHONUNBUFFERED": "1"}

    def migrate(self) -> None:
        """Our stores, then the engine's tables, once. Raises InfrastructureError when the engine's fail."""
        from graph.db_cli import upgrade_all

        out = upgrade_all(self.db)
        self.say(f"stores ready (business store at revision {out['business']})")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "aegra.json").write_text(json.dumps(engine_config(), indent=2) + "\n")
        done = subprocess.run([sys.executable, "-c", "from aegra_api.core.migrations import run_migrations; "
                               "run_migrations()"], cwd=self.run_dir, env=self.env(), capture_output=True, text=True,
                              timeout=300)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise InfrastructureError(f"the {self.engine} migrations failed: {last}")
        self.say(f"{self.engine} tables ready")

    def start(self, inst: Instance) -> None:
        """Start (or restart) one instance; its output goes to ``run_dir/instance-<i>.log``."""
        log = open(self.run_dir / f"instance-{inst.index}.log", "ab")  # noqa: SIM115 - owned by the child's lifetime
        cmd = [sys.executable, "-m", "uvicorn", "aegra_api.main:app", "--host", self.host, "--port", str(inst.port),
               "--no-access-log"]
        inst.proc = subprocess.Popen(cmd, cwd=self.run_dir, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()

    def wait_ready(self, inst: Instance) -> None:
        """Wait until the instance answers ``/health``. Raises InfrastructureError when it exits or times out."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        url = f"http://{self.host}:{inst.port}/health"
        while time.monotonic() < deadline:
            if inst.proc.poll() is not None:
                raise InfrastructureError(f"instance {inst.index} exited with code {inst.proc.returncode}; see "
                                          f"{self.run_dir / f'instance-{inst.index}.log'}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - loopback URL we built
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

    def watch(self, should_stop: Callable[[], bool]) -> None:
        """Until ``should_stop()``: restart any instance that died (each restart printed and counted)."""
        while not should_stop():
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


def _exit_text(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def engine_config() -> dict[str, Any]:
    """The ``aegra.json`` the launcher writes: our graph, authentication and run guard (``graph.aegra_app``) by
    absolute file path or module (the folder it is written to is not the repository)."""
    here = Path(__file__).resolve().parent
    return {"graphs": {"switchboard": f"{here / 'server.py'}:graph"}, "auth": {"path": f"{here / 'auth.py'}:auth"},
            "http": {"app": "graph.aegra_app:app"}}


def serve(engine: str, db: str, instances: int, port: int, host: str, say: Callable[[str], None] = print) -> None:
    """Run the launcher in the foreground until SIGINT/SIGTERM; see :class:`Launcher`."""
    launcher = Launcher(engine, db, instances, port, host, say)
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
