"""Requests to our team (close, freeze or unfreeze an account: ``sr_…``): closing is asked first, a wish to cancel
it withdraws it, "unfreeze my account" is an unfreeze request, and operator commands list and close the requests.
"""

from __future__ import annotations

import json

from checkpoints.business import open_store
from graph.builder import build_desk
from graph.contracts.settings import Settings
from graph.conversation import Conversation
from nodes.embedded.offline_model import OfflineChatModel
from nodes.embedded.playbook import CLOSE_ACCOUNT_ASKED
from nodes.router import default_router
from tests.conftest import invoke_cli


def _desk(path):
    """The desk with the shipped router on the fixture's home (the account agent's requests need its intents)."""
    from checkpoints import open_checkpointer

    s = Settings.from_env(db=path / "switchboard.db", business_db=path / "business.db")
    router = default_router()
    return build_desk(model=OfflineChatModel(router=router), checkpointer=open_checkpointer(s.db), settings=s,
                      router=router)


def _requests(store, customer: str = "c_ada") -> list[dict]:
    return store.list_service_requests([customer])


def test_closing_asks_first_a_yes_files_it_and_a_cancel_wish_withdraws_it(home):
    store = open_store(home / "business.db")
    conv = Conversation("acc", desk=_desk(home))
    asked = conv.send("I want to close my account")
    assert CLOSE_ACCOUNT_ASKED in asked.text and _requests(store) == [], asked.text
    filed = conv.send("yes")
    [request] = _requests(store)
    assert request["kind"] == "close_account" and request["status"] == "open"
    assert request["request_id"] in filed.text, filed.text
    withdrawn = conv.send("no, cancel the closure")
    assert "withdrawn" in withdrawn.text and request["request_id"] in withdrawn.text, withdrawn.text
    assert [r["status"] for r in _requests(store)] == ["cancelled"]
    nothing = conv.send("cancel it")
    assert "no open request" in nothing.text and [r["status"] for r in _requests(store)] == ["cancelled"]


def test_a_no_to_the_closure_question_files_nothing(home):
    store = open_store(home / "business.db")
    conv = Conversation("acc2", desk=_desk(home))
    conv.send("I want to close my account")
    conv.send("no")
    assert _requests(store) == []


def test_unfreezing_the_account_is_its_own_request_not_the_freeze(home):
    store = open_store(home / "business.db")
    conv = Conversation("acc3", desk=_desk(home))
    conv.send("please freeze my account")
    r = conv.send("unfreeze my account")
    assert "unfreeze your account" in r.text and "request to freeze" not in r.text, r.text
    assert sorted(x["kind"] for x in _requests(store)) == ["freeze_account", "unfreeze_account"]


def test_operators_list_the_requests_of_their_tenant(home):
    store = open_store(home / "business.db")
    mine = store.open_service_request("c_ada", "close_account", "service:t1:close_account")
    store.cancel_service_request("c_ada", "close_account")
    store.open_service_request("c_ada", "unfreeze_account", "service:t2:unfreeze_account")
    listed = invoke_cli("tasks", "--requests", "--json", "--as", "agt")
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert [(r["request_id"], r["kind"], r["status"]) for r in rows][0] == (mine["request_id"], "close_account",
                                                                           "cancelled")
    assert [r["kind"] for r in rows] == ["close_account", "unfreeze_account"] and rows[0]["cancelled_at"]
    assert set(rows[0]) == {"request_id", "kind", "customer_id", "status", "opened_at", "cancelled_at"}
    table = invoke_cli("tasks", "--requests", "--as", "agt")
    assert mine["request_id"] in table.output and "unfreeze_account" in table.output, table.output
    refused = invoke_cli("tasks", "--requests", "--as", "nobody")
    assert refused.exit_code != 0
