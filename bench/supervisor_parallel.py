"""Benchmark: wall time of one 3-expert compound request, experts in parallel vs one after another.

Scripted models (no network): triage hands to the supervisor, the supervisor calls billing, refunds and
cards in one message, and each expert sleeps ``--sleep-ms`` (default 100 ms) before answering — a stand-in for
one LLM call.  The same compiled graph runs both ways: parallel is LangGraph's default for the ``Send``
fan-out; sequential caps the run at ``max_concurrency=1``, so the three expert tasks of the superstep run one
after another.  Prints the median and min over ``--runs`` turns (fresh thread each) and the speed-up.

Run: ``.venv/bin/python bench/supervisor_parallel.py [--runs 15] [--sleep-ms 100]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkpoints.business import open_store
from graph import RunContext, build_graph
from graph.contracts.settings import Settings
from nodes.expert import EXPERT_NOTE
from nodes.testing.scripted import ScriptedChatModel, tool_call

EXPERTS = ("billing", "refunds", "cards")


@dataclass(frozen=True)
class _Route:
    agent: str = "other"
    confidence: float = 0.9
    intent: str | None = None


class _Router:
    """The graph's entry asks a router where a turn starts; the scripted models never call it."""

    def route(self, text: str) -> _Route:
        return _Route()


def scripted(sleep_s: float) -> ScriptedChatModel:
    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[tool_call("transfer_to_supervisor", reason="compound")])
        if agent == "supervisor":
            return AIMessage(content="", tool_calls=[tool_call(f"expert_{e}", objective=f"part for {e}") for e in EXPERTS])
        assert any(isinstance(m, SystemMessage) and EXPERT_NOTE in str(m.content) for m in msgs)
        time.sleep(sleep_s)
        return AIMessage(content=f"{agent} checked")

    return ScriptedChatModel(policy=policy)


def one_turn(graph, thread: str, max_concurrency: int | None) -> float:
    cfg: dict = {"configurable": {"thread_id": thread}}
    if max_concurrency:
        cfg["max_concurrency"] = max_concurrency
    t0 = time.perf_counter()
    out = graph.invoke({"messages": [HumanMessage("three things")]}, cfg, context=RunContext())
    dt = time.perf_counter() - t0
    answer = (out["outcome"].answer if out.get("outcome") is not None else None) or {}
    if [p["expert"] for p in answer.get("parts", [])] != list(EXPERTS) or answer.get("status") != "complete":
        raise SystemExit(f"unexpected outcome: {out.get('outcome')}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--sleep-ms", type=float, default=100.0)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="sb-bench-"))
    graph = build_graph(model=scripted(args.sleep_ms / 1000), checkpointer=InMemorySaver(),
                        settings=Settings.from_env(max_experts=len(EXPERTS)), router=_Router(),
                        store=open_store(home / "business.db"))
    one_turn(graph, "warm-up", None)
    rows = {}
    for label, slug, conc in (("parallel (default)", "parallel", None), ("sequential (max_concurrency=1)", "sequential", 1)):
        # thread ids allow only A-Z a-z 0-9 . _ : - (graph.contracts.inputs.check_thread_id)
        times = [one_turn(graph, f"{slug}-{i}", conc) for i in range(args.runs)]
        rows[label] = times
    print(f"3-expert compound request, scripted experts sleeping {args.sleep_ms:g} ms each, {args.runs} turns per mode")
    print(f"{'mode':34} {'median ms':>10} {'min ms':>8} {'max ms':>8}")
    for label, times in rows.items():
        print(f"{label:34} {statistics.median(times) * 1000:10.1f} {min(times) * 1000:8.1f} {max(times) * 1000:8.1f}")
    par, seq = (statistics.median(t) for t in rows.values())
    print(f"speed-up (median sequential / median parallel): {seq / par:.2f}x;"
          f" expert sleep alone: parallel >= {args.sleep_ms:g} ms, sequential >= {3 * args.sleep_ms:g} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
