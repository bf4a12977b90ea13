"""Crash test of the approval flow: SIGKILL at random points, then recover every thread.

Each run is a child process with its own checkpoint and business databases. The child builds the graph,
prints READY, then sends a refund request above the auto-approval limit (the run pauses for approval) and
resumes it with an approval (fixed decision_id per run, as an approver's UI would hold it). The parent kills
the child with SIGKILL after a random delay drawn over the measured duration of an uninterrupted flow.

Recovery, per run, in this process: ``Conversation.recover()`` (replays a decision already claimed in the
business store, or continues a run stopped between nodes); a thread still cleanly pending is then approved
with the same decision_id (the approver retries). A message that never reached the first checkpoint is sent
again (the customer retries). Invariants checked for every run:

* at most one executed refund per run, and exactly one once approved (zero duplicates);
* every recorded approval has its executed refund (zero lost approvals);
* every thread ends completed, or was cleanly pending before the approver's retry.

Usage: ``python bench/crash_approval.py [--runs 50] [--seed 7]``; exit 1 when an invariant fails.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TEXT = "I want a refund for tx_1001 please, that Tesco order never happened"

CHILD = r'''
import sys, time
from pathlib import Path
home = Path(sys.argv[1])
from checkpoints import open_checkpointer
from graph import build_graph
from graph.contracts.context import RunContext
from graph.conversation import Conversation
from graph.contracts.settings import Settings
from nodes.embedded.offline_model import OfflineChatModel
from nodes.testing.scripted import KeywordRouter
r = KeywordRouter()
s = Settings.from_env(db=home / "switchboard.db", business_db=home / "business.db")
g = build_graph(model=OfflineChatModel(router=r), checkpointer=open_checkpointer(s.db), settings=s, router=r)
from checkpoints.business import open_store
store = open_store(s.business_db)
if store.get_operator("ann") is None:
    store.add_operator("ann", "t_demo", ["approver"])
print("READY", flush=True)
t0 = time.perf_counter()
Conversation("crash", graph=g).send(sys.argv[2])
Conversation("crash", graph=g, context=RunContext.for_operator("ann", "t_demo")).resume(
    {"decision": "approve", "decision_id": "dc_crash"})
print("DONE", time.perf_counter() - t0, flush=True)
'''


def _desk(home: Path):
    from checkpoints import open_checkpointer
    from graph.builder import build_desk
    from graph.contracts.settings import Settings
    from nodes.embedded.offline_model import OfflineChatModel
    from nodes.testing.scripted import KeywordRouter

    r = KeywordRouter()
    s = Settings.from_env(db=home / "switchboard.db", business_db=home / "business.db")
    return build_desk(model=OfflineChatModel(router=r), checkpointer=open_checkpointer(s.db), settings=s, router=r)


def _child(home: Path) -> subprocess.Popen:
    env = {**os.environ, "SWITCHBOARD_HOME": str(home), "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(home), TEXT], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_ready(p: subprocess.Popen) -> None:
    line = p.stdout.readline()
    if not line.startswith("READY"):
        raise SystemExit(f"child failed before READY: {line}{p.stderr.read()}")


def measure_flow(base: Path) -> float:
    """Seconds of one uninterrupted send+approve flow, after READY."""
    home = base / "baseline"
    home.mkdir()
    p = _child(home)
    _wait_ready(p)
    out, err = p.communicate(timeout=120)
    done = [ln for ln in out.splitlines() if ln.startswith("DONE")]
    if p.returncode != 0 or not done:
        raise SystemExit(f"baseline flow failed: {err}")
    return float(done[0].split()[1])


def recover(home: Path) -> dict:
    """Recover one run and check its invariants; returns the run's figures."""
    from graph.contracts.context import RunContext
    from graph.conversation import Conversation

    d = _desk(home)
    g, store = d.graph, d.deps.store
    if store.get_operator("ann") is None:
        store.add_operator("ann", "t_demo", ["approver"])
    conv = Conversation("crash", desk=d, context=RunContext(user_id="c_ada", tenant_id="t_demo"))  # the owner
    state_before = "not_started"
    if conv.state:
        pend = conv.pending()
        v = conv.state
        done = v.get("outcome") is not None and v["outcome"].turn == v.get("turn") and not g.get_state(conv.config).next
        state_before = "pending" if pend is not None else ("finished" if done else "mid_run")
    executed_before = [r for r in store.list_refunds("c_ada") if r.status == "executed" and r.transaction_id == "tx_1001"]
    recovered = None
    if not conv.state:
        conv.send(TEXT)  # the customer's message never reached a checkpoint: they send it again
    else:
        recovered = conv.recover()
    cleanly_pending = conv.pending() is not None
    if cleanly_pending:
        try:
            Conversation("crash", desk=d, context=RunContext.for_operator("ann", "t_demo")).resume(
                {"decision": "approve", "decision_id": "dc_crash"})
        except Exception as exc:  # noqa: BLE001 - reported as a failure below
            return {"error": f"resume after recovery failed: {exc}"}
    refunds = [r for r in store.list_refunds("c_ada") if r.transaction_id == "tx_1001"]
    executed = [r for r in refunds if r.status == "executed"]
    approvals = []
    state = conv.state
    task_id = state["pending_approval"].task_id if state.get("pending_approval") is not None else None
    if task_id:
        approvals = [d for d in store.list_decisions(task_id) if d.decision == "approve"]
    return {
        "state_before": state_before,
        "executed_before_recovery": len(executed_before),
        "recovered": recovered is not None,
        "cleanly_pending_after_recovery": cleanly_pending,
        "refund_rows": len(refunds),
        "executed": len(executed),
        "approvals": len(approvals),
        "final_status": state["outcome"].status if state.get("outcome") is not None else None,
        "task_status": (store.get_task(task_id).status if task_id and store.get_task(task_id) else None),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None, help="write the per-run figures here")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="switchboard-crash-"))
    flow_s = measure_flow(base)
    print(f"uninterrupted flow: {flow_s * 1000:.0f} ms after READY; kill delays drawn from U(0, {flow_s * 1.2 * 1000:.0f} ms)")
    runs = []
    for i in range(args.runs):
        home = base / f"run{i:03d}"
        home.mkdir()
        p = _child(home)
        _wait_ready(p)
        delay = rng.uniform(0, flow_s * 1.2)
        time.sleep(delay)
        killed = p.poll() is None
        if killed:
            p.send_signal(signal.SIGKILL)
        p.communicate(timeout=60)
        fig = recover(home)
        fig.update(run=i, delay_ms=round(delay * 1000, 1), killed=killed)
        runs.append(fig)
        print(json.dumps(fig), flush=True)
    errors = [r for r in runs if "error" in r]
    dup = sum(1 for r in runs if r.get("executed", 0) > 1)
    lost = sum(1 for r in runs if r.get("approvals", 0) and r.get("executed", 0) != 1)
    incomplete = sum(1 for r in runs if r.get("final_status") != "answered" or r.get("task_status") != "completed")
    by_state: dict[str, int] = {}
    for r in runs:
        by_state[r.get("state_before", "error")] = by_state.get(r.get("state_before", "error"), 0) + 1
    summary = {"runs": len(runs), "killed": sum(r["killed"] for r in runs), "state_at_kill": by_state,
               "recovered_by_replay_or_continue": sum(1 for r in runs if r.get("recovered")),
               "cleanly_pending_then_approved": sum(1 for r in runs if r.get("cleanly_pending_after_recovery")),
               "paid_before_recovery": sum(1 for r in runs if r.get("executed_before_recovery")),
               "duplicate_refunds": dup, "lost_approvals": lost, "incomplete_threads": incomplete,
               "errors": len(errors)}
    print("SUMMARY " + json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": runs}, indent=1))
    return 1 if (dup or lost or incomplete or errors) else 0


if __name__ == "__main__":
    sys.exit(main())
