"""CLI start-up: wall seconds (median of 5 runs, and peak RSS) of ``switchboard --help``, ``threads``, ``pending``,
``history`` and a one-shot ``chat``, and of a bare LangGraph script (a 2-node graph compiled with a SqliteSaver,
run once) as the baseline, each a new process, measured in this one script, taking turns run by run.

Targets (the scoreboard's): ``--help``, ``threads``, ``pending``, ``history`` <= 0.5 s wall;
one-shot ``chat`` <= 1.3x the bare LangGraph script.

Figures: wall seconds, CPU seconds (the child's user + system time: the ratio to read on a shared machine) and peak
RSS. Every process runs with its bytecode cached (in the temporary home), as an installed package does.

Usage: ``python bench/startup.py [--runs 5] [--json FILE]`` (a temporary SWITCHBOARD_HOME with one operator, one
answered thread and one thread paused for approval).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, load_average, write_json

BARE = '''
import sqlite3, sys
from typing import TypedDict
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph

class S(TypedDict):
    text: str

g = StateGraph(S)
g.add_node("a", lambda s: {"text": s["text"] + " a"})
g.add_node("b", lambda s: {"text": s["text"] + " b"})
g.add_edge(START, "a")
g.add_edge("a", "b")
app = g.compile(checkpointer=SqliteSaver(sqlite3.connect(sys.argv[1], check_same_thread=False)))
print(app.invoke({"text": "hi"}, {"configurable": {"thread_id": sys.argv[2]}})["text"])
'''


def _run(cmd: list[str], env: dict) -> tuple[float, float, int, int]:
    """(wall seconds, CPU seconds (user + system), peak RSS kB, exit code) of one process (``os.wait4`` gives that
    child's own rusage)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t0, ru.ru_utime + ru.ru_stime, int(ru.ru_maxrss), p.returncode


def _setup(home: Path, env: dict, sb: list[str]) -> str:
    def cli(*args: str, env: dict = env) -> str:
        r = subprocess.run([*sb, *args], env=env, capture_output=True, text=True, cwd=REPO)
        if r.returncode != 0:
            raise SystemExit(f"error: switchboard {' '.join(args)}: {r.stderr.strip()[-300:]}")
        return r.stdout

    cli("operators", "add", "ida", "--tenant", "t_demo", "--role", "admin", "--role", "approver", "--role", "agent",
        env={k: v for k, v in env.items() if k != "SWITCHBOARD_OPERATOR"})  # the first admin of a new home
    cli("chat", "--thread", "answered", "I was charged twice for my coffee")
    cli("chat", "--thread", "paused", "Please refund tx_1008, I was charged twice")
    return "answered"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="switchboard-startup-"))
    env = {**os.environ, "SWITCHBOARD_HOME": str(home), "SWITCHBOARD_OPERATOR": "ida", "SWITCHBOARD_MODEL": "offline"}
    # ``python -m graph.app.cli`` from this checkout (what the ``switchboard`` script runs), so that the benchmark measures
    # the code beside it
    env["PYTHONPATH"] = str(REPO)
    # bytecode cached as an installed package has it (pip compiles it at install): without this, a shell with
    # PYTHONDONTWRITEBYTECODE set compiles every module of this checkout in every run (~0.3 s of CPU), which the
    # one-file bare script hardly pays; the cache goes to a folder of the temporary home, not into the checkout
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(home / "pycache")
    sb = [sys.executable, "-m", "graph.app.cli"]
    thread = _setup(home, env, sb)
    (home / "bare.py").write_text(BARE)
    cmds = {
        "--help": [*sb, "--help"], "threads": [*sb, "threads"], "pending": [*sb, "pending"],
        "history": [*sb, "history", thread], "chat (one-shot)": [*sb, "chat", "My card has not arrived yet"],
        "bare LangGraph": [sys.executable, str(home / "bare.py"), str(home / "bare.db")],
    }
    walls: dict[str, list[float]] = {k: [] for k in cmds}
    cpus: dict[str, list[float]] = {k: [] for k in cmds}
    rss: dict[str, int] = dict.fromkeys(cmds, 0)
    for i in range(args.runs + 1):  # the first round warms the file cache and is not counted
        for name, cmd in cmds.items():
            extra = [f"t{i}"] if name == "bare LangGraph" else []
            wall, cpu, kb, rc = _run(cmd + extra, env)
            if rc != 0:
                print(f"error: {' '.join(cmd)} exited {rc}", file=sys.stderr)
                return 1
            if i:
                walls[name].append(wall)
                cpus[name].append(cpu)
                rss[name] = max(rss[name], kb)
    fig: dict = {"runs": args.runs, "commands": {}}
    print(f"CLI start-up, median of {args.runs} runs (new process each)   load average {load_average()}")
    for name in cmds:
        med = statistics.median(walls[name])
        cpu = statistics.median(cpus[name])
        fig["commands"][name] = {"median_s": round(med, 3), "min_s": round(min(walls[name]), 3),
                                 "cpu_median_s": round(cpu, 3), "peak_rss_mb": round(rss[name] / 1024, 1)}
        print(f"  {name:16} median {med:6.3f} s   min {min(walls[name]):6.3f} s   CPU {cpu:6.3f} s   "
              f"peak RSS {rss[name] / 1024:6.1f} MB")
    chat, bare = fig["commands"]["chat (one-shot)"]["median_s"], fig["commands"]["bare LangGraph"]["median_s"]
    fig["chat_vs_bare"] = round(chat / bare, 2)
    # CPU seconds (the child's user + system time): steadier than wall time on a shared machine
    fig["chat_vs_bare_cpu"] = round(fig["commands"]["chat (one-shot)"]["cpu_median_s"]
                                    / fig["commands"]["bare LangGraph"]["cpu_median_s"], 2)
    slow = [n for n in ("--help", "threads", "pending", "history") if fig["commands"][n]["median_s"] > 0.5]
    print(f"  chat / bare LangGraph = {fig['chat_vs_bare']:.2f}x wall, {fig['chat_vs_bare_cpu']:.2f}x CPU (target <= 1.3)"
          f"   over 0.5 s: {', '.join(slow) or 'none'}")
    write_json(args.json, fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
