"""Helpers shared by the benchmarks: the scripted policies both frameworks run, the langgraph-swarm anchor graph,
percentiles, and the JSON figure file every benchmark may write (``--json FILE``) for ``bench/run.py``.

The anchors are built from ``bench/anchors.py`` alone (a scripted model and LangGraph's own ``SqliteSaver`` with our
SQLite settings): they import nothing of switchboard, so an anchor measured in its own process carries only its own
memory and start-up. langgraph-swarm and langgraph-supervisor are bench-only dependencies
(``pip install -e '.[bench]'``, also in the dev
extra); :func:`swarm_available` and :func:`supervisor_available` say whether they are installed, and a benchmark
prints "n/a" for a column whose anchor is not.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

#: ``SWITCHBOARD_BENCH_SMOKE=1``: every benchmark runs with tiny sizes (tests/scenarios/test_bench_scripts.py runs each script so,
#: to show it still works; the figures of such a run mean nothing).
SMOKE = os.environ.get("SWITCHBOARD_BENCH_SMOKE", "") not in ("", "0")

#: The agents of the one-turn handoff chain: triage -> billing -> refunds, refunds answers (2 handoffs, 3 model calls).
CHAIN = ("triage", "billing", "refunds")


def load_average() -> list[float]:
    """``os.getloadavg()`` (1, 5, 15 minutes) rounded, recorded beside every figure (the machine is shared)."""
    return [round(x, 2) for x in os.getloadavg()]


def pct(xs: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``xs`` (linear interpolation; needs at least 2 values)."""
    if len(xs) < 2:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[min(98, max(0, int(q) - 1))] if q < 100 else max(xs)


def write_json(path: Path | None, figures: dict[str, Any]) -> None:
    """Write ``figures`` (plus the load average) to ``path`` as JSON when a path is given."""
    if path is not None:
        path.write_text(json.dumps({**figures, "load_average": load_average()}, indent=2, default=str) + "\n")


def swarm_available() -> bool:
    """True when langgraph-swarm (the anchor) is importable."""
    try:
        import langgraph_swarm  # noqa: F401
    except ImportError:
        return False
    return True


def chain_policy(agent: str, user: str, names: set, i: int, msgs: list) -> Any:
    """The scripted model of the handoff chain (``CHAIN``): each agent hands to the next, the last one answers at once."""
    from anchors import tool_call
    from langchain_core.messages import AIMessage

    if agent in CHAIN[:-1]:
        nxt = CHAIN[CHAIN.index(agent) + 1]
        return AIMessage(content="", tool_calls=[tool_call(f"transfer_to_{nxt}", reason="belongs there",
                                                           facts={"transaction_id": "tx_1008"})])
    return AIMessage(content=f"{agent} answers: done.")


def swarm_app(policy: Any, checkpointer: Any, agents: tuple[str, ...] = CHAIN, tools: list | None = None) -> tuple[Any, Any]:
    """A langgraph-swarm graph of ``agents`` (each may hand off to every other, and use ``tools``), driven by a
    ScriptedChatModel with ``policy``; returns ``(compiled app, model)``. The first agent is the default active one."""
    from anchors import AnchorChatModel
    from langchain.agents import create_agent
    from langgraph_swarm import create_handoff_tool, create_swarm

    model = AnchorChatModel(policy=policy)
    members = [create_agent(model, tools=[*(tools or []), *(create_handoff_tool(agent_name=o) for o in agents if o != a)],
                            system_prompt=f"You are the {a} agent.", name=a) for a in agents]
    return create_swarm(members, default_active_agent=agents[0]).compile(checkpointer=checkpointer), model


def refund_status_swarm(checkpointer: Any) -> tuple[Any, Any]:
    """The langgraph-swarm anchor of the growth benchmarks (storage, model input): refunds and billing as a swarm,
    refunds answering "where is my refund?" with one ``refund_status`` tool call, then the answer. Returns
    ``(compiled app, its scripted model)``, as :func:`swarm_app`."""
    from anchors import tool_call
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    @tool
    def refund_status(refund_id: str = "") -> str:
        """The status of the customer's latest refund."""
        return "Refund rf_2001 of 23.80 EUR: approved, paid back on 20 Nov."

    def policy(agent: str, user: str, names: set, i: int, msgs: list) -> Any:
        if msgs and msgs[-1].type == "tool":
            return AIMessage(content="Your refund rf_2001 of 23.80 EUR was paid back on 20 Nov.")
        return AIMessage(content="", tool_calls=[tool_call("refund_status")])

    return swarm_app(policy, checkpointer, agents=("refunds", "billing"), tools=[refund_status])


def refund_status_supervisor(checkpointer: Any) -> tuple[Any, Any]:
    """The langgraph-supervisor anchor of the storage benchmark: the supervisor delegates "where is my refund?" to a
    refunds worker, which answers with one ``refund_status`` tool call and the answer, and hands back; the supervisor
    then answers. Returns ``(compiled app, its scripted model)``, as :func:`supervisor_app`."""
    from anchors import tool_call
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    @tool
    def refund_status(refund_id: str = "") -> str:
        """The status of the customer's latest refund."""
        return "Refund rf_2001 of 23.80 EUR: approved, paid back on 20 Nov."

    def worker(agent: str, user: str, names: set, i: int, msgs: list) -> Any:
        if msgs and msgs[-1].type == "tool" and msgs[-1].name == "refund_status":
            return AIMessage(content="Your refund rf_2001 of 23.80 EUR was paid back on 20 Nov.")
        return AIMessage(content="", tool_calls=[tool_call("refund_status")])

    return supervisor_app(worker, checkpointer, workers=("refunds",), tools=[refund_status])


def supervisor_available() -> bool:
    """True when langgraph-supervisor (the second anchor, a central supervisor graph) is importable."""
    try:
        import langgraph_supervisor  # noqa: F401
    except ImportError:
        return False
    return True


def supervisor_app(worker_policy: Any, checkpointer: Any, workers: tuple[str, ...] = ("refunds",),
                   tools: list | None = None, delegate: Any = None, recursion_limit: int | None = None) -> tuple[Any, Any]:
    """A langgraph-supervisor graph (``create_supervisor``): a supervisor agent delegating to ``workers`` (each a
    ``create_agent`` with ``tools``) by its handoff tools; a worker that answers hands control back to the supervisor
    (the library's handoff-back messages). One ScriptedChatModel drives all: workers by ``worker_policy`` (the
    :func:`chain_policy` signature), the supervisor by ``delegate(call, messages) -> worker name | None`` (None: it
    answers; default: the first worker on the turn's first supervisor call, then answer). Returns ``(app, model)``.

    Where it applies: a supervisor graph has no peer-to-peer handoff, so a turn that reaches ``refunds`` costs two
    handoffs (supervisor -> refunds, refunds -> supervisor) and three model calls, as the chain of :data:`CHAIN`."""
    from anchors import AnchorChatModel, tool_call
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph_supervisor import create_supervisor

    def first_then_answer(call: int, msgs: list) -> str | None:
        since_user = msgs[max(i for i, m in enumerate(msgs) if isinstance(m, HumanMessage)):]
        return None if any(m.type == "tool" for m in since_user) else workers[0]

    choose = delegate or first_then_answer

    def policy(agent: str, user: str, names: set, i: int, msgs: list) -> Any:
        if agent != "supervisor":
            return worker_policy(agent, user, names, i, msgs)
        target = choose(i, msgs)
        if target is None:
            return AIMessage(content="The supervisor answers: done.")
        return AIMessage(content="", tool_calls=[tool_call(f"transfer_to_{target}")])

    model = AnchorChatModel(policy=policy)
    members = [create_agent(model, tools=list(tools or []), system_prompt=f"You are the {w} agent.", name=w)
               for w in workers]
    graph = create_supervisor(members, model=model, prompt="You are the supervisor agent.")
    app = graph.compile(checkpointer=checkpointer)
    if recursion_limit is not None:
        app = app.with_config(recursion_limit=recursion_limit)
    return app, model


def answer_at_once(agent: str, user: str, names: set, i: int, msgs: list) -> Any:
    """A worker policy: answer at once (the supervisor anchor of the per-handoff and throughput benchmarks)."""
    from langchain_core.messages import AIMessage

    return AIMessage(content=f"{agent} answers: done.")
