"""The demo story with the real offline model and shipped router: triage -> billing -> refunds."""

from __future__ import annotations

from graph.conversation import Conversation


def test_double_charge_story_offline(tmp_path):
    from checkpoints import open_checkpointer
    from graph import build_graph
    from graph.contracts.settings import Settings

    settings = Settings.from_env(db=tmp_path / "cp.db", business_db=tmp_path / "biz.db")
    g = build_graph(checkpointer=open_checkpointer(settings.db), settings=settings)
    conv = Conversation("demo", graph=g)
    r = conv.send("Hi, I was charged twice for my coffee this morning and I'd like the money back for the extra one.")
    hops = [h.to_agent for h in r.handoff_path if h.kind != "flow"]
    assert hops == ["triage", "billing", "refunds"], r.path_str
    assert r.agent == "refunds"
    assert "tx_1008" in r.text  # the refund answer names the duplicate transaction
    assert [h.to_agent for h in r.handoff_path if h.kind == "flow"] == ["risk", "refund_execute", "refunds"]
    values = conv.state
    billing_packet = [h for h in values["handoff_path"] if h.to_agent == "refunds" and h.kind == "handoff"][0]
    assert billing_packet.from_agent == "billing"
    facts = {f.key: f for f in values["handoff"].known_facts}
    assert facts["transaction_id"].value == "tx_1008"
    assert facts["transaction_id"].source == "system_verified"
    # turn 2 continues at refunds without triage; turn 3 changes topic and goes through triage
    r2 = conv.send("Thanks! Where can I see that refund now?")
    assert [h.to_agent for h in r2.handoff_path] == ["refunds"] and r2.agent == "refunds"
    r3 = conv.send("Another thing: I think I lost my card yesterday.")
    assert [h.to_agent for h in r3.handoff_path] == ["triage", "cards"]
