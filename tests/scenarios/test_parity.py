"""Every way in answers the same conversation the same, turn by turn: ``Conversation``, the compiled graph's
``invoke``, ``langgraph dev`` and ``switchboard serve`` (both through ``langgraph_sdk``) run one table of multi-turn
conversations (``nodes.testing.parity.CASES``, the paused-thread dialogue included) from identically seeded stores;
the answering agent, the path, the status, the text and the business effects must match at every step.

The reference is ``graph.invoke``; the HTTP legs are gated like the other service tests (``subprocess``; ``serve``
also needs PostgreSQL).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nodes.testing.parity import (
    CASES,
    PARITY_PREFIX,
    ConversationLeg,
    HttpLeg,
    InvokeLeg,
    Observed,
    customers_in,
    parity_customers,
    paused_kinds,
    run_leg,
)
from tests.conftest import postgres_database

REPO = Path(__file__).resolve().parents[2]


def _desk(home: Path):
    from checkpoints import open_checkpointer
    from graph.builder import build_desk
    from graph.contracts.settings import Settings

    s = Settings.from_env(db=home / "switchboard.db", business_db=home / "business.db")
    desk = build_desk(checkpointer=open_checkpointer(s.db), settings=s)
    return desk, _seed(desk.deps.store)


def _seed(store) -> list[dict]:
    for name in ("ann", "ben"):
        if store.get_operator(name) is None:
            store.add_operator(name, "t_demo", ["approver"])
    return parity_customers(store, customers_in())


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[list[Observed], object]:
    home = tmp_path_factory.mktemp("parity-invoke")
    desk, customers = _desk(home)
    return run_leg(InvokeLeg(desk), customers), desk


def _same(reference: list[Observed], other: list[Observed], leg: str) -> None:
    assert len(reference) == len(other)
    diffs = [(a, b) for a, b in zip(reference, other, strict=True) if a != b]
    if diffs:
        lines = [f"{leg}: {len(diffs)} of {len(reference)} steps differ from graph.invoke"]
        for a, b in diffs[:8]:
            lines.append(f"- {a.case} step {a.step}:\n    invoke: {a}\n    {leg}: {b}")
        pytest.fail("\n".join(lines))


def test_the_table_covers_every_paused_behaviour_and_enough_conversations(reference):
    observed, desk = reference
    assert len(CASES) >= 40 and len({c.name for c in CASES}) == len(CASES)
    assert all(len(c.steps) >= 2 for c in CASES), [c.name for c in CASES if len(c.steps) < 2]
    kinds = {e.detail.get("kind") for e in desk.deps.events.events(kinds=["paused_answered"])}
    wanted = {"freeze", "person", "social", "question", "elsewhere", "ask", "cancel", "keep", "ack", "status", "other"}
    assert wanted <= paused_kinds(), wanted - paused_kinds()
    assert wanted <= kinds, f"the runs never reached {sorted(wanted - kinds)}"
    # nothing in the table is refused except the approval of a refund its customer cancelled
    refused = [(o.case, o.step) for o in observed if o.refused]
    assert refused == [("cancel then approval refused", 3)], [o.detail for o in observed if o.refused]


def test_the_table_does_what_each_conversation_says(reference):
    """Spot checks that the reference itself is right (parity of a wrong answer would prove little)."""
    observed, _ = reference
    by = {(o.case, o.step): o for o in observed}
    assert by[("duplicate charge", 0)].agent == "billing"
    assert by[("status question", 1)].status == "awaiting_approval" and "waiting" in by[("status question", 1)].text
    cancelled = by[("cancel confirmed", 2)]
    assert cancelled.agent == "refunds" and cancelled.status == "answered", cancelled
    assert any(s == "cancelled" for _, s in cancelled.effects[0]), cancelled.effects
    assert by[("cancel confirmed", 1)].text.startswith("Cancel refund rf_# of £23.80 for ")
    frozen = by[("lost card while paused", 1)]
    assert frozen.agent == "cards" and ("0005", "frozen") in frozen.effects[1] or \
        any(s == "frozen" for _, s in frozen.effects[1]), frozen
    assert by[("person while paused", 1)].effects[2] == (("talk_to_person", "open"),)
    assert by[("approved by the operator", 1)].agent == "refunds"
    assert any(s == "executed" for _, s in by[("approved by the operator", 1)].effects[0])
    kept = by[("cancel declined", 3)]  # a "yes" after "no" answers no question: nothing is cancelled
    assert all(s == "requested" for _, s in kept.effects[0]), kept


def test_conversation_answers_like_graph_invoke(reference, tmp_path):
    observed, _ = reference
    desk, customers = _desk(tmp_path / "home")
    _same(observed, run_leg(ConversationLeg(desk), customers), "Conversation")


def _tokens(store, customers: list[dict]) -> dict[str, str]:
    ids = ["c_ada", "c_bob", *(c["id"] for c in customers)]
    tokens = {pid: store.issue_token("customer", pid, "t_demo")[1] for pid in ids}
    tokens.update({name: store.issue_token("operator", name, "t_demo")[1] for name in ("ann", "ben")})
    return tokens


@pytest.mark.subprocess
@pytest.mark.slow
def test_langgraph_dev_answers_like_graph_invoke(reference, tmp_path):
    from checkpoints.business import open_store
    from nodes.testing.served import langgraph_dev

    observed, _ = reference
    home = tmp_path / "home"
    store = open_store(home / "business.db")
    customers = _seed(store)
    tokens = _tokens(store, customers)
    with langgraph_dev(tmp_path, home, REPO) as base:
        _same(observed, run_leg(HttpLeg("langgraph dev", base, tokens, store), customers), "langgraph dev")


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.postgres
def test_switchboard_serve_answers_like_graph_invoke(reference, tmp_path):
    from nodes.testing.served import launched

    observed, _ = reference
    customers = [{"id": f"{PARITY_PREFIX}{i:02d}"} for i in range(customers_in())]
    who = [("c_ada", "t_demo"), ("c_bob", "t_demo"), *((c["id"], "t_demo") for c in customers)]
    assert all(c["id"].startswith(PARITY_PREFIX) for c in customers)
    with postgres_database() as url, launched(url, tmp_path, instances=1, customers=who,
                                              setup=lambda st: parity_customers(st, customers_in()),
                                              operators=(("ann", "t_demo", ("approver",)),
                                                         ("ben", "t_demo", ("approver",)))) as served:
        from checkpoints import open_checkpointer

        leg = HttpLeg("switchboard serve", served.base(0), served.tokens, served.store,
                      saver=open_checkpointer(url))
        _same(observed, run_leg(leg, parity_customers(served.store, customers_in())), "switchboard serve")
