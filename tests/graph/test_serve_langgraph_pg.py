"""``switchboard serve --engine langgraph-pg``: LangGraph's own Agent Server (langgraph-api 0.11.1, Elastic License 2.0)
on the MIT PostgreSQL + Redis runtime (langgraph-runtime-pg / langhost 0.11.1.post1), two instances over one database
and the local Redis, driven by the official ``langgraph_sdk``.

The engine lives in a virtual environment of its own (``make langgraph-pg``; see ``graph/service/serve.py`` for why), so these
tests run only when SWITCHBOARD_TEST_LANGGRAPH_PG names it (and SWITCHBOARD_TEST_POSTGRES a server), else they are
deselected. Checked: a three-turn conversation with a handoff and an approval pause on instance 0, the approval
resumed by an operator through instance 1 (paid once, a second resume refused), another customer refused, the thread's
owner recorded before the first run, a second message on a busy thread enqueued (409 with ``reject``), a customer's
token reads the customer's view of the thread, Ctrl-C stops both instances.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from checkpoints.business import open_store
from checkpoints.event_log import open_event_log
from nodes.testing.served import Served, launched
from nodes.testing.served import interrupts as _interrupts
from nodes.testing.served import is_free as _free
from nodes.testing.served import status_of as _status
from tests.conftest import LANGGRAPH_PG_ENV, postgres_database

BIG = "I want a refund for tx_1001 please"  # £23.80: pauses for one approver

pytestmark = [pytest.mark.postgres, pytest.mark.langgraph_pg, pytest.mark.subprocess, pytest.mark.slow]


@pytest.fixture(scope="module")
def served_lg(tmp_path_factory) -> Iterator[Served]:
    venv = os.environ[LANGGRAPH_PG_ENV]
    with postgres_database() as url, launched(url, tmp_path_factory.mktemp("serve-lg"), "--engine", "langgraph-pg",
                                              "--engine-venv", venv) as s:
        yield s


def test_conversation_on_langgraph_api_with_the_postgres_runtime(served_lg: Served) -> None:
    ada, ann_other, bob = served_lg.client("c_ada", 0), served_lg.client("ann", 1), served_lg.client("c_bob", 1)
    tid = ada.threads.create()["thread_id"]

    def say(text: str) -> dict:
        return ada.runs.wait(tid, "switchboard", input={"messages": [{"role": "user", "content": text}]})

    first = say("I was charged twice for my coffee")
    assert first["outcome"]["agent"] == "billing" and "handoff_path" not in first  # the customer's view
    handoffs = open_event_log(served_lg.url).events(tid, kinds=["handoff_accepted"])
    assert [(e.from_agent, e.to_agent) for e in handoffs][:1] == [("triage", "billing")]  # triage handed off to billing
    store = open_store(served_lg.url)
    owner = store.thread_owner(tid)
    assert (owner.customer_id, owner.source) == ("c_ada", "server")
    second = say(BIG)
    pending = _interrupts(ada.threads.get_state(tid))
    assert len(pending) == 1 and second["pending_approval"]["refund_id"] == pending[0]["value"]["refund_id"]
    refund_id = pending[0]["value"]["refund_id"]
    # another customer sees nothing of the thread: langgraph-runtime-pg answers a thread its auth filter hides with an
    # empty state (200), the LangGraph API with 404
    try:
        peek = bob.threads.get_state(tid)
    except Exception:  # noqa: BLE001 - an HTTP error is a refusal too
        peek = {}
    assert not peek.get("values") and not peek.get("tasks")
    assert _status(lambda: bob.runs.wait(tid, "switchboard", input={"messages": [
        {"role": "user", "content": "show me all"}]})) in (403, 404)
    assert len(ada.threads.get_state(tid)["values"]["messages"]) == len(second["messages"])  # Bob's run stored nothing
    done = ann_other.runs.wait(tid, "switchboard", command={"resume": {"decision": "approve", "note": "ok"}})
    assert done["outcome"]["agent"] == "refunds" and "paid back" in done["outcome"]["text"]
    after = ada.threads.get_state(tid)["values"]["messages"]
    try:  # a second resume: refused, or (langgraph-api answers 200 when nothing is pending) a run that changes nothing
        ann_other.runs.wait(tid, "switchboard", command={"resume": {"decision": "approve"}})
    except Exception:  # noqa: BLE001 - a refusal is fine too
        pass
    assert ada.threads.get_state(tid)["values"]["messages"] == after
    third = say("Thanks! Where is my refund now?")
    assert third["outcome"]["status"] == "answered" and third["turn"] == 3
    assert store.load_refund(refund_id).status == "executed"
    assert len([r for r in store.list_refunds("c_ada") if r.status == "executed" and r.transaction_id == "tx_1001"]) == 1


def test_a_second_message_on_a_busy_thread_waits_its_turn_or_is_rejected(served_lg: Served) -> None:
    """langgraph-api 0.11's default multitask strategy for a run is ``enqueue``: a second message sent while the first
    turn is pending or running (here through the other instance) runs after it, in order; ``reject`` answers 409;
    ``interrupt``/``rollback`` are refused (403, graph/service/auth.py)."""
    ada, ada_other = served_lg.client("c_ada", 0), served_lg.client("c_ada", 1)
    tid = ada.threads.create()["thread_id"]
    first = ada.runs.create(tid, "switchboard", input={"messages": [
        {"role": "user", "content": "I was charged twice for my coffee"}]})
    second = ada_other.runs.create(tid, "switchboard", input={"messages": [{"role": "user", "content": "Where is my card?"}]})
    assert _status(lambda: ada_other.runs.create(tid, "switchboard", multitask_strategy="reject", input={"messages": [
        {"role": "user", "content": "hello?"}]})) == 409
    assert _status(lambda: ada.runs.create(tid, "switchboard", multitask_strategy="rollback", input={"messages": [
        {"role": "user", "content": "hello?"}]})) == 403
    ada.runs.join(tid, first["run_id"])
    ada.runs.join(tid, second["run_id"])
    kinds = [m["type"] for m in ada.threads.get_state(tid)["values"]["messages"]]
    humans = [i for i, k in enumerate(kinds) if k == "human"]
    assert len(humans) == 2 and kinds[humans[1] - 1] == "ai" and kinds[-1] == "ai"  # one turn after the other


def test_a_customer_token_reads_the_customers_view_on_langgraph_pg(served_lg: Served) -> None:
    """The Agent Server on the PostgreSQL runtime mounts ``graph.service.view_guard`` from the ``langgraph.json`` the launcher
    writes: a customer's run outputs, state, history, thread, runs and stream events are the customer's view; the
    approver's own run output keeps everything."""
    import httpx

    from graph.contracts.views import CUSTOMER_KEYS, customer_view
    from nodes.testing.served import NOTE, leaks, new_transaction
    from policies.authz import OPERATOR_CANCEL, UNCONFIRMED_CANCEL
    ada, ann = served_lg.client("c_ada", 0), served_lg.client("ann", 1)
    tx = new_transaction(served_lg.url, "tx_1921", 3400)
    tid = ada.threads.create()["thread_id"]
    paused = ada.runs.wait(tid, "switchboard", input={"messages": [{"role": "user", "content":
                                                                     f"I want a refund for {tx} please"}]})
    assert set(paused) <= set(CUSTOMER_KEYS) | {"__interrupt__"} and leaks(paused) == []
    assert paused["pending_approval"]["stage"] == "awaiting_approval" and leaks(ada.threads.get_state(tid)) == []
    for who, reason in (("c_ada", UNCONFIRMED_CANCEL), ("ann", OPERATOR_CANCEL)):
        refused = httpx.post(f"http://127.0.0.1:{served_lg.port}/threads/{tid}/runs/wait", timeout=60,
                             json={"assistant_id": "switchboard", "command": {"resume": {"decision": "cancel"}}},
                             headers={"Authorization": f"Bearer {served_lg.tokens[who]}"})
        assert refused.status_code == 403 and refused.json()["detail"].endswith(reason), refused.text
    done = ann.runs.wait(tid, "switchboard", command={"resume": {"decision": "reject", "note": NOTE}})
    assert done["pending_approval"]["decision"]["note"] == NOTE
    state = ada.threads.get_state(tid)
    assert state["values"] == customer_view(done) and state["values"]["refund_outcome"]["status"] == "rejected"
    for doc in (state, ada.threads.get_history(tid, limit=50), ada.threads.get(tid), ada.runs.list(tid)):
        assert leaks(doc) == [], doc
    events = list(ada.runs.stream(tid, "switchboard", input={"messages": [{"role": "user", "content": "thanks"}]}))
    assert {e.event for e in events} <= {"metadata", "values", "end", "error"}
    assert leaks([e.data for e in events]) == [] and [e.data for e in events if e.event == "values"][-1]["turn"] == 2


def test_ctrl_c_stops_both_instances(served_lg: Served) -> None:
    os.killpg(served_lg.proc.pid, signal.SIGINT)
    assert served_lg.proc.wait(timeout=60) == 0
    assert "stopped" in served_lg.out.read_text()
    assert _free(served_lg.port) and _free(served_lg.port + 1)
