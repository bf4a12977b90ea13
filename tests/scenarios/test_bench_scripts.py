"""Every script under bench/ runs, with tiny sizes (``SWITCHBOARD_BENCH_SMOKE=1`` and the arguments below), and
exits 0: a benchmark that no longer runs is found by ``make test``, not by the next ``make bench``. The figures of
such a run mean nothing; only that the script still works."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import banking77

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"

#: Modules the scripts import (not scripts themselves).
MODULES = {"common.py", "scoreboard.py", "anchors.py"}

#: Tiny-size arguments per script (``{tmp}``: a fresh folder of the test, ``{data}``: ../shared/data); scripts not
#: listed run without any.
ARGS: dict[str, list[str]] = {
    "compound_detection.py": ["--pairs", "20"],
    "context_budget.py": ["--turns", "4"],
    "crash_approval.py": ["--runs", "2"],
    "edge_health.py": ["--home", "{tmp}/home", "--repeat", "1"],
    "events_overhead.py": ["--limit", "6"],
    "handoff_overhead.py": ["--turns", "3"],
    "merged_training_set.py": ["{tmp}/merged", "--holdout", "50"],
    "model_input.py": ["--turns", "10"],
    "route_losses.py": ["{data}/banking77/test.csv", "--labels", "{data}/banking77/agent_map.json", "--limit", "12"],
    "router_heads.py": ["{tmp}/heads"],
    "router_speed.py": ["--calls", "20", "--baseline-calls", "5"],
    "run.py": ["pingpong"],
    "serve_load.py": ["--conversations", "4", "--concurrency", "2", "--modes", "sqlite1"],
    "startup.py": ["--runs", "1"],
    "storage.py": ["--turns", "10"],
    "store_calls.py": ["--calls", "20"],
    "supervisor_parallel.py": ["--runs", "2", "--sleep-ms", "5"],
    "tracing_overhead.py": ["--turns", "3"],
    "throughput.py": ["--threads", "4"],
}

#: Scripts that read ../shared/data (they fail, never skip, when it is missing).
NEEDS_DATA = {"compound_detection.py", "events_overhead.py", "handon_patterns.py", "merged_training_set.py",
              "route_losses.py", "route_scale.py", "router_heads.py", "router_scope.py", "router_speed.py",
              "router_tuning.py", "intent_coverage.py"}

SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if p.name not in MODULES)


def test_every_script_is_listed_or_runs_without_arguments():
    assert set(ARGS) <= set(SCRIPTS), set(ARGS) - set(SCRIPTS)


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_bench_script_runs_with_tiny_sizes(script: str, tmp_path: Path) -> None:
    if script in NEEDS_DATA:
        banking77()
    if script == "router_heads.py":  # it reads the output of merged_training_set.py
        subprocess.run([sys.executable, str(BENCH / "merged_training_set.py"), str(tmp_path / "heads"), "--holdout",
                        "50"], cwd=REPO, check=True, capture_output=True, timeout=300)
    args = [a.replace("{tmp}", str(tmp_path)).replace("{data}", str(REPO.parent / "shared" / "data"))
            for a in ARGS.get(script, [])]
    env = {**{k: v for k, v in os.environ.items() if k not in ("SWITCHBOARD_OPERATOR", "SWITCHBOARD_DB")},
           "SWITCHBOARD_BENCH_SMOKE": "1", "SWITCHBOARD_BENCH_RESULTS": str(tmp_path / "results"),
           "SWITCHBOARD_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=REPO, capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, f"{script} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"


@pytest.mark.subprocess
def test_the_swarm_anchor_imports_no_switchboard_module(tmp_path: Path) -> None:
    """A process that builds and runs the langgraph-swarm anchor (bench/anchors.py, bench/common.py) imports nothing
    of graph/, nodes/, policies/, checkpoints/: its memory and start-up are the anchor's own."""
    code = ("import sys; sys.path.insert(0, 'bench'); import anchors, common; "
            "from langchain_core.messages import HumanMessage; "
            f"app, model = common.swarm_app(common.chain_policy, anchors.sqlite_saver({str(tmp_path / 's.db')!r})); "
            "app.invoke({'messages': [HumanMessage('I was charged twice')]}, {'configurable': {'thread_id': 't'}}); "
            "assert model.calls == 3, model.calls; "
            "mode = anchors.sqlite_saver.__doc__ and app.checkpointer.conn.execute('PRAGMA journal_mode').fetchone()[0]; "
            "assert mode == 'wal', mode; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('graph', 'nodes', 'policies', 'checkpoints')))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]"
