"""The typed graph state (graph.contracts.state, graph.contracts.state_values): the handoff packet, handoff path,
approval request, task, owner and outcome are models in state, stored and read back as models by the SQLite and
PostgreSQL checkpointers, and threads that earlier versions checkpointed with plain dicts still load and resume."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from pydantic import BaseModel, ValidationError

from checkpoints import open_checkpointer
from checkpoints.factory import desk_serde
from graph.builder import build_desk
from graph.contracts.approval import PendingApproval
from graph.contracts.context import RunContext
from graph.contracts.packet import HandoffPacket, HandoffRecord
from graph.contracts.settings import Settings
from graph.contracts.state_values import MSGPACK_ALLOWLIST, Outcome, Owner, TaskState, as_model, pending_of
from graph.contracts.views import customer_view
from graph.conversation import Conversation
from nodes.embedded.offline_model import OfflineChatModel
from nodes.testing.scripted import KeywordRouter

BIG = "I want a refund for tx_1001 please, that Tesco order never happened"  # £23.80: one approver
ANN = RunContext.for_operator("ann", "t_demo")


def _desk(home: Path, checkpoints: str | Path):
    s = Settings.from_env(db=home / "switchboard.db", business_db=home / "business.db")
    r = KeywordRouter()
    d = build_desk(model=OfflineChatModel(router=r), checkpointer=open_checkpointer(checkpoints), settings=s, router=r)
    if d.deps.store.get_operator("ann") is None:
        d.deps.store.add_operator("ann", "t_demo", ["approver"])
    return d


def _cfg(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def _typed(values: dict) -> None:
    assert isinstance(values["pending_approval"], PendingApproval)
    assert isinstance(values["pending_approval"].request.amount_minor, int)
    assert isinstance(values["owner"], Owner) and values["owner"].customer_id == "c_ada"
    assert isinstance(values["task"], TaskState) and values["task"].status == "awaiting_approval"
    assert values["handoff_path"] and all(isinstance(h, HandoffRecord) for h in values["handoff_path"])
    assert all(isinstance(h.packet, HandoffPacket) for h in values["handoff_path"] if h.packet is not None)
    assert values.get("handoff") is None or isinstance(values["handoff"], HandoffPacket)


def test_the_models_round_trip_through_the_checkpointer_and_a_fresh_process_resumes(isolated_home, business_url):
    """A paused thread on SQLite (and, gated, PostgreSQL) reads back as the same models from a new checkpointer (a new
    process), whose resume pays once; no value came back as a dict."""
    d = _desk(isolated_home, business_url)
    Conversation("p", desk=d).send(BIG)
    before = d.graph.get_state(_cfg("p")).values
    _typed(before)
    assert before["pending_approval"].stage == "awaiting_approval"
    again = _desk(isolated_home, business_url)
    after = again.graph.get_state(_cfg("p")).values
    _typed(after)
    for key in ("pending_approval", "owner", "task", "handoff_path", "handoff"):
        assert after.get(key) == before.get(key), key
    r = Conversation("p", desk=again, context=ANN).resume({"decision": "approve"})
    assert r.status == "answered" and r.agent == "refunds"
    final = again.graph.get_state(_cfg("p")).values
    assert final["pending_approval"].stage == "executed" and isinstance(final["outcome"], Outcome)
    assert customer_view(final)["refund_outcome"]["status"] == "executed"


def _as_dicts(value: Any) -> Any:
    """``value`` with every model replaced by its JSON dict, and the waiting stage under its earlier name
    (``awaiting``): what earlier versions stored."""
    if isinstance(value, PendingApproval):
        data = value.model_dump(mode="json")
        return {**data, "stage": "awaiting" if value.waiting else data["stage"]}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, _DeltaSnapshot):
        return _DeltaSnapshot(_as_dicts(value.value))
    if isinstance(value, dict):
        return {k: _as_dicts(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_as_dicts(v) for v in value)
    return value


def _rewrite_as_dicts(db: Path) -> int:
    """Rewrite every checkpoint and write of the SQLite file ``db`` with plain dicts in place of the models; returns
    how many stored values held a model."""
    serde, changed = desk_serde(), 0
    conn = sqlite3.connect(db)
    with conn:
        for table, column in (("checkpoints", "checkpoint"), ("writes", "value")):
            rows = conn.execute(f"SELECT rowid, type, {column} FROM {table}").fetchall()
            for rowid, kind, blob in rows:
                value = serde.loads_typed((kind, blob))
                plain = _as_dicts(value)
                if plain != value or repr(plain) != repr(value):
                    changed += 1
                    conn.execute(f"UPDATE {table} SET type = ?, {column} = ? WHERE rowid = ?",
                                 (*serde.dumps_typed(plain), rowid))
    conn.close()
    return changed


def test_a_thread_checkpointed_with_plain_dicts_and_old_names_loads_as_models_and_resumes(isolated_home):
    db = isolated_home / "old.db"
    d = _desk(isolated_home, db)
    Conversation("old", desk=d).send(BIG)
    d.graph.checkpointer.conn.close()
    assert _rewrite_as_dicts(db) > 0
    with sqlite3.connect(db) as conn:  # the rewrite left no model behind
        blobs = [b for (b,) in conn.execute("SELECT value FROM writes")]
    assert not any(b"graph.contracts.state_values" in b or b"graph.contracts.approval" in b for b in blobs if b)
    assert any(b"awaiting_approval" not in b and b"awaiting" in b for b in blobs if b)  # the old stage name
    old = _desk(isolated_home, db)
    values = old.graph.get_state(_cfg("old")).values
    _typed(values)
    assert values["pending_approval"].waiting
    r = Conversation("old", desk=old, context=ANN).resume({"decision": "reject", "note": "checked"})
    assert r.status == "answered" and "not approved" in r.text
    assert old.graph.get_state(_cfg("old")).values["pending_approval"].stage == "rejected"


def test_the_stage_is_a_literal_an_unknown_stage_is_refused():
    pa = PendingApproval(stage="risk", refund_id="rf_1", task_id="task_1")
    assert pa.evolve(stage="awaiting_approval").waiting and pa.evolve(stage="executed").final
    with pytest.raises(ValidationError, match="stage"):
        pa.evolve(stage="paid")
    with pytest.raises(ValidationError, match="stage"):
        PendingApproval.model_validate({"stage": "waiting", "refund_id": "rf_1"})
    with pytest.raises(ValidationError):  # frozen: a new stage is a new value
        pa.stage = "approved"  # type: ignore[misc]


def test_readers_take_models_dicts_and_nothing_alike():
    pa = {"stage": "awaiting", "refund_id": "rf_1", "request": None}  # the waiting stage's earlier name
    assert pending_of({"pending_approval": pa}) == PendingApproval(stage="awaiting_approval", refund_id="rf_1")
    model = PendingApproval(stage="risk", refund_id="rf_2")
    assert pending_of({"pending_approval": model}) is model
    assert pending_of({"pending_approval": {}}) is None and pending_of({}) is None and pending_of(None) is None
    assert as_model(Owner, {"customer_id": "c_ada"}) == Owner(customer_id="c_ada", tenant_id="")
    with pytest.raises(ValidationError):
        as_model(Owner, {"tenant_id": "t_demo"})  # an owner names its customer


def test_the_serializer_rebuilds_exactly_the_state_models():
    serde = desk_serde()
    pa = PendingApproval(stage="risk", refund_id="rf_1", risk_flags=("new payee",))
    assert serde.loads_typed(serde.dumps_typed(pa)) == pa
    assert ("graph.contracts.approval", "PendingApproval") in MSGPACK_ALLOWLIST
    assert ("graph.contracts.packet", "Fact") in MSGPACK_ALLOWLIST  # nested in HandoffPacket
