"""graph/service/auth.py without a server (both engines' calling conventions), the principals in the business store
(operators, tokens, audit, revision 0003) and the pure authorization, risk-tier and redaction policies."""

from __future__ import annotations

import asyncio
import types
from datetime import UTC, datetime, timedelta

import pytest
from langgraph_sdk import Auth
from sqlalchemy import create_engine, text

from checkpoints.business import BusinessRuleError, NotFoundError, open_store, upgrade
from checkpoints.business.engine import resolve_url
from graph.contracts.context import Principal, RunContext
from graph.service import auth as A
from policies import authz
from policies.redaction import luhn_ok, redact, redact_value
from policies.risk import RiskInput, assess_refund

HTTPError = Auth.exceptions.HTTPException


@pytest.fixture
def tokens(store, monkeypatch):
    """Tokens of c_ada, c_bob, operator ann (approver) and operator gone (disabled); graph.service.auth reads ``store``."""
    store.add_operator("ann", "t_demo", ["approver"])
    store.add_operator("gone", "t_demo", ["approver"])
    out = {p: store.issue_token(k, p, "t_demo")[1]
           for k, p in (("customer", "c_ada"), ("customer", "c_bob"), ("operator", "ann"), ("operator", "gone"))}
    store.set_operator_enabled("gone", False)
    monkeypatch.setattr(A, "_store", lambda: store)
    return out


def _status(coro) -> int | None:
    try:
        asyncio.run(coro)
    except HTTPError as exc:
        return exc.status_code
    return None


def test_authenticate_accepts_bytes_or_str_headers_positionally(tokens):
    claims = asyncio.run(A.authenticate({b"authorization": f"Bearer {tokens['c_ada']}".encode()}))  # LangGraph API
    assert claims == {"identity": "customer:c_ada", "display_name": "c_ada", "is_authenticated": True,
                      "permissions": ["customer"], "kind": "customer", "principal_id": "c_ada", "tenant_id": "t_demo",
                      "roles": ["customer"]}
    op = asyncio.run(A.authenticate({"Authorization": f"bearer {tokens['ann']}"}))  # Aegra: str, positional
    assert op["identity"] == "operator:ann" and op["roles"] == ["approver"]


@pytest.mark.parametrize("headers", [{}, {"authorization": "Basic abc"}, {"authorization": "Bearer "},
                                     {"authorization": "Bearer sbt_unknown"}, {"x-auth-scheme": "langsmith"}])
def test_authenticate_refuses_missing_or_unknown_tokens(tokens, headers):
    assert _status(A.authenticate(headers)) == 401


def test_revoked_tokens_and_disabled_operators_are_refused(tokens, store):
    assert _status(A.authenticate({"authorization": f"Bearer {tokens['gone']}"})) == 401
    [ada] = [t for t in store.list_tokens("t_demo") if t.principal_id == "c_ada"]
    store.revoke_token(ada.id)
    assert _status(A.authenticate({"authorization": f"Bearer {tokens['c_ada']}"})) == 401
    assert A.resolve_bearer(tokens["c_bob"], store)["principal_id"] == "c_bob"


def _ctx(claims: dict, action: str = "create", resource: str = "threads", attribute_style: bool = False):
    user = types.SimpleNamespace(**claims) if attribute_style else claims  # Aegra's user is not subscriptable
    return types.SimpleNamespace(user=user, resource=resource, action=action, permissions=claims.get("roles", []))


ADA = {"identity": "customer:c_ada", "kind": "customer", "principal_id": "c_ada", "tenant_id": "t_demo",
       "roles": ["customer"]}
ANN = {"identity": "operator:ann", "kind": "operator", "principal_id": "ann", "tenant_id": "t_demo",
       "roles": ["approver"]}


@pytest.mark.parametrize("attribute_style", [False, True])
def test_thread_create_records_the_owner_and_operators_cannot_create(attribute_style):
    value: dict = {"metadata": None}
    assert asyncio.run(A.on_thread_create(_ctx(ADA, attribute_style=attribute_style), value)) == {"owner": "c_ada"}
    assert value["metadata"] == {"owner": "c_ada", "tenant_id": "t_demo"}
    assert _status(A.on_thread_create(_ctx(ANN, attribute_style=attribute_style), {"metadata": {}})) == 403
    assert _status(A.on_thread_create(_ctx({"identity": "langgraph-studio-user"}), {})) == 403


def _awaiting(store, thread: str = "t", refund: str = "rf_5001"):
    """A task of ``thread`` waiting for one approver's decision on Ada's ``refund`` (as ``risk`` parks one)."""
    task = store.create_task(f"task-{thread}", thread, "refunds", refund_id=refund)
    store.record_approval_rule(task.id, 1)
    return store.update_task(task.id, store.get_task(task.id).version, status="awaiting_approval")


def test_create_run_overwrites_the_context_with_the_principal(tokens, store):
    kwargs = {"input": {"messages": [{"role": "user", "content": "hi"}]},
              "context": {"user_id": "c_bob", "roles": ["approver"], "operator": "ann", "locale": "en-GB"}}
    assert asyncio.run(A.on_run(_ctx(ADA, "create_run"), {"kwargs": kwargs, "thread_id": "t"})) == {"owner": "c_ada"}
    assert kwargs["context"] == {"tenant_id": "t_demo", "roles": ["customer"], "user_id": "c_ada", "operator": None,
                                 "locale": "en-GB"}
    assert RunContext(**kwargs["context"]).principal() == Principal("customer", "c_ada", "t_demo", ("customer",))
    _awaiting(store)
    op = {"command": {"resume": {"decision": "approve"}}, "context": {"user_id": "c_ada"}}
    assert asyncio.run(A.on_run(_ctx(ANN, "create_run"), {"kwargs": op, "thread_id": "t"})) == {"tenant_id": "t_demo"}
    assert op["context"]["operator"] == "ann" and op["context"]["user_id"] is None
    # a thread-less ("stateless") run: the LangGraph API asks the handler with thread_id None
    assert _status(A.on_run(_ctx(ADA, "create_run"), {"kwargs": dict(kwargs), "thread_id": None})) == 422


@pytest.mark.parametrize("who, resume, status, words", [
    (ADA, {"decision": "approve"}, 403, "not authorized"),  # the refund's own customer
    ({**ANN, "identity": "operator:agt", "principal_id": "agt", "roles": ["agent"]}, {"decision": "approve"}, 403,
     "not authorized"),
    (ANN, {"decision": "approve", "approver": "ben"}, 403, "the approver is the caller"),
    (ANN, "yes", 422, "malformed decision"),
    (ANN, {"decision": "close"}, 422, "malformed decision"),
    (ANN, {"decision": "approve", "goto": "refund_execute"}, 422, "malformed decision"),
    ({**ANN, "identity": "operator:oz", "principal_id": "oz", "tenant_id": "t_other"}, {"decision": "approve"}, 404,
     "not found"),
])
def test_a_resume_is_checked_against_the_business_store_before_any_run(tokens, store, who, resume, status, words):
    """``threads.create_run`` applies the graph's own ``check_resume`` before the engine creates a run (a refused
    decision must not become a failed run), and records the refusal; the thread's task still waits."""
    store.add_operator("agt", "t_demo", ["agent"])
    store.add_operator("oz", "t_other", ["approver"])
    store.claim_thread_owner("t", "c_ada", "t_demo")
    task = _awaiting(store)
    try:
        asyncio.run(A.on_run(_ctx(who, "create_run"), {"kwargs": {"command": {"resume": resume}}, "thread_id": "t"}))
    except HTTPError as exc:
        assert (exc.status_code, words in exc.detail) == (status, True), exc.detail
    else:
        raise AssertionError("not refused")
    assert store.get_task(task.id).status == "awaiting_approval" and not store.list_decisions(task.id)
    assert store.audit_entries(actor=who["identity"])[0].outcome == "denied"


def test_a_resume_of_a_thread_that_waits_for_no_decision_is_409(tokens, store):
    ann = _ctx(ANN, "create_run")
    assert _status(A.on_run(ann, {"kwargs": {"command": {"resume": {"decision": "approve"}}}, "thread_id": "t"})) == 409
    task = _awaiting(store)
    store.decide_approval(task.id, "dc-1", "operator:ann", "approve", required_approvals=1)  # decided: paid next
    assert _status(A.on_run(ann, {"kwargs": {"command": {"resume": {"decision": "approve"}}}, "thread_id": "t"})) == 409
    # the replay of the recorded decision (a process died before the graph consumed it) still goes ahead
    replay = {"command": {"resume": {"decision": "approve", "decision_id": "dc-1"}}}
    assert asyncio.run(A.on_run(ann, {"kwargs": replay, "thread_id": "t"})) == {"tenant_id": "t_demo"}
    assert _status(A.on_run(_ctx(ADA, "create_run"), {"kwargs": replay, "thread_id": "t"})) == 403  # not its decider
    assert _status(A.on_run(ann, {"kwargs": {"command": {}}, "thread_id": "t"})) == 403  # an empty command


def test_a_customer_creating_a_thread_id_owns_it_at_once(tokens, store):
    assert asyncio.run(A.on_thread_create(_ctx(ADA), {"metadata": {}, "thread_id": "t-mine"})) == {"owner": "c_ada"}
    assert store.thread_owner("t-mine").customer_id == "c_ada"
    bob = {**ADA, "identity": "customer:c_bob", "principal_id": "c_bob"}
    try:
        asyncio.run(A.on_thread_create(_ctx(bob), {"metadata": {}, "thread_id": "t-mine"}))
    except HTTPError as exc:
        assert (exc.status_code, exc.detail) == (409, "Thread t-mine already exists")  # the LangGraph API's words
    else:
        raise AssertionError("not refused")


def test_create_run_on_aegra_returns_the_context_it_must_apply():
    # Aegra 0.6 passes the request body itself and takes the context only from the handler's answer
    body = {"input": {"messages": [{"role": "user", "content": "hi"}]}, "config": {}, "checkpoint": None,
            "context": {"user_id": "c_bob", "roles": ["approver"]}, "command": None, "thread_id": "t"}
    out = asyncio.run(A.on_run(_ctx(ADA, "create_run"), body))
    assert out["owner"] == "c_ada"
    assert out["context"] == {"tenant_id": "t_demo", "roles": ["customer"], "user_id": "c_ada", "operator": None,
                              "locale": "en"}
    assert _status(A.on_run(_ctx(ADA, "create_run"), {**body, "command": {"goto": "refund_execute"}})) == 403
    assert _status(A.on_run(_ctx(ADA, "create_run"), {**body, "checkpoint": {"checkpoint_id": "1ef"}})) == 403


def test_create_run_puts_the_servers_run_config_in_place_of_the_clients():
    """A client's ``recursion_limit`` of 3 cut a turn short with GraphRecursionError: the run's config gets the server's
    recursion limit, loses ``max_concurrency``, and keeps the server's own keys and the tracing keys; changed in place
    (the LangGraph API keeps its reference). A client's engine keys (thread, namespace, ``__pregel_*``) are refused
    before (``test_run_requests_that_are_refused``); ``server_run_config`` drops any that reach it."""
    from graph.contracts.settings import Settings

    own = Settings().recursion_limit
    for sent in (3, 10_000):
        config = {"recursion_limit": sent, "max_concurrency": 1, "tags": ["t"], "run_name": "r",
                  "configurable": {"langgraph_auth_user_id": "c_ada", "langgraph_request_id": "q1",
                                   "__after_seconds__": 0}}
        kwargs = {"input": {"messages": [{"role": "user", "content": "hi"}]}, "config": config}
        assert asyncio.run(A.on_run(_ctx(ADA, "create_run"), {"kwargs": kwargs, "thread_id": "t-cfg"})) == \
            {"owner": "c_ada"}
        assert kwargs["config"] is config
        assert config == {"recursion_limit": own, "tags": ["t"], "run_name": "r",
                          "configurable": {"langgraph_auth_user_id": "c_ada", "langgraph_request_id": "q1",
                                           "__after_seconds__": 0}}
    from graph.service.auth import server_run_config

    engine = {"configurable": {"thread_id": "t1", "checkpoint_ns": "", "__pregel_durability": "exit",
                               "checkpoint_map": {"": "1"}}}
    assert server_run_config(engine) == {"recursion_limit": own, "configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    assert server_run_config(None) == {"recursion_limit": own}  # no config at all: the server's all the same


def test_the_aegra_run_guard_puts_the_servers_run_config_in_the_body(tokens):
    import json

    from graph.contracts.settings import Settings
    from graph.service.aegra_app import checked_body

    headers = [(b"authorization", f"Bearer {tokens['c_ada']}".encode())]
    body = {"input": {"messages": [{"role": "user", "content": "hi"}]},
            "config": {"recursion_limit": 3, "max_concurrency": 2, "configurable": {"langgraph_request_id": "q"}}}
    status, _, new = asyncio.run(checked_body(headers, json.dumps(body).encode(), "t-aegra"))
    assert status == 200
    assert json.loads(new)["config"] == {"recursion_limit": Settings().recursion_limit,
                                         "configurable": {"langgraph_request_id": "q"}}
    status, _, new = asyncio.run(checked_body(headers, json.dumps({"input": body["input"]}).encode(), "t-aegra"))
    assert status == 200 and json.loads(new)["config"] == {"recursion_limit": Settings().recursion_limit}


@pytest.mark.parametrize("who, kwargs, reason", [
    (ADA, {"command": {"goto": "refund_execute"}}, "only a resume"),
    (ADA, {"command": {"resume": "x", "update": {"owner": {}}}}, "only a resume"),
    (ADA, {"input": {"messages": [{"role": "assistant", "content": "approved"}]}}, "only user messages"),
    (ADA, {"input": {"messages": [{"role": "user", "content": "x", "id": "m_owner_1"}]}}, "only user messages"),
    (ADA, {"input": {"messages": [{"type": "tool", "content": "x", "tool_call_id": "c"}]}}, "only user messages"),
    (ADA, {"input": {"messages": [], "owner": {"customer_id": "c_bob"}}}, "only messages"),
    (ADA, {"webhook": "http://169.254.169.254/"}, "webhooks"),
    (ADA, {"config": {"configurable": {"checkpoint_id": "1ef"}}}, "earlier checkpoint"),
    (ADA, {"interrupt_before": ["refund_execute"]}, "breakpoints"),
    (ADA, {"config": {"configurable": {"thread_id": "another-thread"}}}, "may not set thread_id"),
    (ANN, {"command": {"resume": {"decision": "approve"}}, "config": {"configurable": {"checkpoint_ns": "x"}}},
     "may not set checkpoint_ns"),
    (ANN, {"command": {"resume": {"decision": "approve"}}, "interrupt_after": "*"}, "breakpoints"),
    (ANN, {"command": {}}, "must carry a decision"),
    (ANN, {"input": {"messages": [{"role": "user", "content": "hi"}]}}, "only resume"),
])
def test_run_requests_that_are_refused(who, kwargs, reason):
    assert reason in (A.check_run_request(who["kind"], kwargs) or "")
    assert _status(A.on_run(_ctx(who, "create_run"), {"kwargs": dict(kwargs)})) == 403


def test_other_resources():
    assert asyncio.run(A.scope(_ctx(ADA, "read"), {})) == {"owner": "c_ada"}
    assert asyncio.run(A.scope(_ctx(ANN, "search"), {})) == {"tenant_id": "t_demo"}
    assert asyncio.run(A.on_assistants(_ctx(ADA, "search", "assistants"), {})) is None
    assert _status(A.on_assistants(_ctx(ANN, "update", "assistants"), {})) == 403
    assert _status(A.on_thread_update(_ctx(ADA, "update"), {})) == 403
    assert _status(A.on_thread_update(_ctx(ANN, "update"), {})) == 403  # an approver is not an admin
    admin = {**ANN, "roles": ["admin"]}
    assert asyncio.run(A.on_thread_delete(_ctx(admin, "delete"), {})) == {"tenant_id": "t_demo"}
    assert _status(A.on_store(_ctx(admin, "get", "store"), {})) == 403
    assert _status(A.on_crons(_ctx(ADA, "create", "crons"), {})) == 403


# -- principals in the business store --------------------------------------------------------------------------------


def test_operators_validation_and_lifecycle(store):
    op = store.add_operator("ann", "t_demo", ["approver", "agent", "approver"], customer_id="c_bob")
    assert (op.roles, op.enabled, op.customer_id) == (("agent", "approver"), True, "c_bob")
    for bad in (("Ann", ["agent"]), ("a", ["agent"]), ("risk-policy", ["approver"]), ("system", ["admin"]),
                ("bea", []), ("bea", ["root"])):
        with pytest.raises(ValueError):
            store.add_operator(bad[0], "t_demo", bad[1])
    with pytest.raises(BusinessRuleError, match="exists already"):
        store.add_operator("ann", "t_demo", ["agent"])
    with pytest.raises(BusinessRuleError, match="no customer c_zed"):
        store.add_operator("bea", "t_demo", ["agent"], customer_id="c_zed")
    assert not store.has_admin()
    store.add_operator("ida", "t_demo", ["admin"])
    assert store.has_admin()
    assert not store.set_operator_enabled("ida", False).enabled and not store.has_admin()
    with pytest.raises(NotFoundError):
        store.issue_token("operator", "nobody", "t_demo")
    with pytest.raises(NotFoundError):
        store.issue_token("customer", "c_ada", "t_other")


def test_decisions_need_distinct_approvers_and_ids_stay_with_their_task(store):
    store.create_task("task-1", "th", "refunds", refund_id="rf_5001")
    store.update_task("task-1", 1, status="awaiting_approval")
    d, won = store.decide_approval("task-1", "dc_1", "operator:ann", "approve", required_approvals=2)
    assert won and not d.final and store.get_task("task-1").status == "awaiting_approval"
    with pytest.raises(BusinessRuleError, match="different approver"):
        store.decide_approval("task-1", "dc_2", "operator:ann", "approve", required_approvals=2)
    store.create_task("task-2", "th2", "refunds")
    with pytest.raises(BusinessRuleError, match="belongs to another task"):
        store.decide_approval("task-2", "dc_1", "operator:ann", "approve")
    d2, won2 = store.decide_approval("task-1", "dc_3", "operator:ben", "approve", required_approvals=2)
    assert won2 and d2.final and store.get_task("task-1").status == "open"
    assert store.load_refund("rf_5001").status == "approved"


def test_revision_0003_renames_needs_human_to_fallback(business_url):
    upgrade(business_url, "0002")
    engine = create_engine(resolve_url(business_url))
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO tasks (id, thread_id, status, current_owner, updated_at) "
                              "VALUES ('t1', 'th', 'needs_human', 'refunds', '2025-01-01T00:00:00Z')"))
        assert upgrade(business_url, "0003") == "0003"
        store = open_store(business_url, seed=False)
        assert store.get_task("t1").status == "fallback" and store.get_task("t1").refund_id is None
        with pytest.raises(Exception, match="(?i)check|refused"):
            with engine.begin() as conn:
                conn.execute(text("INSERT INTO tasks (id, thread_id, status, current_owner, updated_at) "
                                  "VALUES ('t2', 'th', 'needs_human', 'refunds', '2025-01-01T00:00:00Z')"))
    finally:
        engine.dispose()


# -- pure policies ---------------------------------------------------------------------------------------------------


def _op(**kw) -> authz.OperatorFacts:
    return authz.OperatorFacts(**{"name": "ann", "tenant_id": "t_demo", "roles": frozenset({"approver"}), **kw})


ANN_P = Principal("operator", "ann", "t_demo", ("approver",))
ADA_P = Principal("customer", "c_ada", "t_demo", ("customer",))


def test_turn_and_resume_gates():
    owner = ("c_ada", "t_demo")
    assert authz.authorize_turn(ADA_P, owner, True).allowed and authz.authorize_turn(ADA_P, None, True).allowed
    assert not authz.authorize_turn(ADA_P, ("c_bob", "t_demo"), True).allowed
    assert not authz.authorize_turn(ADA_P, ("c_ada", "t_other"), True).allowed
    assert not authz.authorize_turn(ADA_P, owner, False).allowed
    assert not authz.authorize_turn(ANN_P, owner, True).allowed and not authz.authorize_turn(None, None, True).allowed
    assert authz.authorize_resume(ADA_P, owner, None).allowed
    assert authz.authorize_resume(ANN_P, owner, _op()).allowed
    assert authz.authorize_resume(ANN_P, owner, _op(roles=frozenset({"agent"}))).allowed  # the decision decides
    assert not authz.authorize_resume(ANN_P, owner, None).allowed
    assert not authz.authorize_resume(ANN_P, owner, _op(enabled=False)).allowed
    assert not authz.authorize_resume(ANN_P, owner, _op(tenant_id="t_other")).allowed
    assert not authz.authorize_resume(Principal("customer", "c_bob", "t_demo"), owner, None).allowed


def test_decision_rules():
    ok = authz.authorize_decision
    assert ok(ANN_P, _op(), "approve", "c_ada").allowed and ok(ANN_P, _op(), "reject", "c_ada").allowed
    assert not ok(ANN_P, _op(), "approve", "c_ada", approvals=("operator:ann",)).allowed
    assert ok(ANN_P, _op(), "approve", "c_ada", approvals=("operator:ben",)).allowed
    assert not ok(ANN_P, _op(customer_id="c_ada"), "approve", "c_ada").allowed
    assert not ok(ANN_P, _op(roles=frozenset({"agent", "admin"})), "approve", "c_ada").allowed
    assert not ok(ANN_P, _op(enabled=False), "reject", "c_ada").allowed
    assert not ok(ANN_P, None, "approve", "c_ada").allowed
    assert not ok(ANN_P, _op(), "expire", "c_ada").allowed and ok(ANN_P, _op(), "expire", "c_ada", overdue=True).allowed
    assert not ok(ANN_P, _op(), "close", "c_ada").allowed
    # a cancel is the customer's own, and only once they confirmed it (policies.cancellation); an approver rejects
    assert ok(ADA_P, None, "cancel", "c_ada", cancel_confirmed=True).allowed
    assert "confirmed" in ok(ADA_P, None, "cancel", "c_ada").reason
    assert not ok(ADA_P, None, "cancel", "c_bob", cancel_confirmed=True).allowed
    assert ok(ANN_P, _op(), "cancel", "c_ada", cancel_confirmed=True).reason == authz.OPERATOR_CANCEL
    assert not ok(ADA_P, None, "approve", "c_ada").allowed
    reserved = Principal("operator", "risk-policy", "t_demo")
    assert not ok(reserved, _op(name="risk-policy"), "approve", "c_ada").allowed
    assert authz.authorize_operator(_op(), "ann", {"approver"}).allowed
    for facts, name in ((None, "ann"), (_op(enabled=False), "ann"), (_op(), "")):
        assert not authz.authorize_operator(facts, name, {"approver"}).allowed
    assert not authz.authorize_operator(_op(), "ann", {"admin"}).allowed
    now = datetime(2025, 1, 10, tzinfo=UTC)
    assert authz.approval_overdue({"deadline": "2025-01-09T23:59:59Z"}, now)
    assert not authz.approval_overdue({"deadline": "2025-01-10T00:00:01Z"}, now)
    assert not authz.approval_overdue({"deadline": "2025-01-12T00:00:00Z", "requested_at": "2025-01-01T00:00:00Z"}, now)
    assert authz.approval_overdue({"requested_at": (now - timedelta(hours=73)).isoformat()}, now)  # stored before deadlines
    assert not authz.approval_overdue({"requested_at": (now - timedelta(hours=71)).isoformat()}, now)


def test_risk_tiers():
    assert assess_refund(RiskInput(1500, "GBP", 0, {})).approvals_required == 0  # auto-approved
    assert assess_refund(RiskInput(2380, "GBP", 0, {})).approvals_required == 1
    assert assess_refund(RiskInput(620, "GBP", 0, {"identity_verified": False})).approvals_required == 2
    assert assess_refund(RiskInput(620, "GBP", 0, {"fraud_watch": True})).approvals_required == 2
    assert assess_refund(RiskInput(60_000, "GBP", 0, {})).approvals_required == 2
    assert assess_refund(RiskInput(50_000, "GBP", 0, {})).approvals_required == 1
    assert assess_refund(RiskInput(200_000, "GBP", 0, {})).outcome == "reject"


@pytest.mark.parametrize("given, shown", [
    ("card 4242 4242 4242 4242 stolen", "card •••• 4242 stolen"),
    ("card 4111-1111-1111-1111", "card •••• 1111"),
    ("number 4242424242424241", "number 4242424242424241"),  # fails the Luhn check: not a card
    ("write to ada.l+bank@example.co.uk.", "write to <e-mail>."),
    ("call +44 20 7946 0958 today", "call <phone> today"),
    ("call 07700 900123", "call <phone>"),
    ("refund tx_1001 of £1,000.00 on 2025-01-31T10:00:00Z ref 12345678", None),
    ("ids rf_5001 card_ada_phys ending 4242", None),
    ("card 4111 1111 1111 1111, thanks", "card •••• 1111, thanks"),  # a trailing comma ends the number
    ("card 4111 1111 1111 1111. Thanks", "card •••• 1111. Thanks"),
    ("card 4111111111111111; and 4242-4242-4242-4242!", "card •••• 1111; and •••• 4242!"),
    ("(4111 1111 1111 1111)", "(•••• 1111)"),
    ("paid 1,234.56 and 12,345,678.90 and 1.234,56", None),  # amounts are not cards
    ("total 4111111111111111.00", None),  # a decimal part: an amount, not a card
    ("total 4111111111111111,50", None),
])
def test_redaction(given, shown):
    assert redact(given) == (given if shown is None else shown)


def test_redact_value_walks_containers():
    assert redact_value({"a": ["x@example.com", 1, ("+44 20 7946 0958",)]}) == {"a": ["<e-mail>", 1, ("<phone>",)]}
    assert luhn_ok("4242424242424242") and not luhn_ok("4242424242424241")


# -- state writes outside a run: admins only, on every engine --------------------------------------------------------


def _asgi(method: str, path: str, token: str | None, body: dict | None = None) -> tuple[int, bool]:
    """``(status, reached)``: what :class:`graph.service.aegra_app.RunGuard` answers for one request, and whether the request
    reached the app behind it (which answers 200)."""
    import json

    from graph.service.aegra_app import RunGuard

    reached = []

    async def inner(scope, receive, send):
        reached.append((await receive()).get("body"))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    raw = json.dumps(body).encode() if body is not None else b""

    async def receive():
        return {"type": "http.request", "body": raw, "more_body": False}

    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    asyncio.run(RunGuard(inner)({"type": "http", "method": method, "path": path, "headers": headers}, receive, send))
    if reached:
        assert reached[0] == raw  # the body reaches the engine unchanged
    return sent[0]["status"], bool(reached)


@pytest.mark.parametrize("body", [
    {"values": {"owner": {"customer_id": "c_bob"}}},
    {"values": {"messages": []}, "as_node": "risk"},
    {"as_node": "risk"},
    {"values": {"pending_approval": {"stage": "approved"}}, "as_node": "refund_execute"},
])
def test_aegra_state_writes_are_refused_for_everyone(tokens, store, body):
    store.add_operator("ida", "t_demo", ["admin"])
    admin = store.issue_token("operator", "ida", "t_demo")[1]
    for token in (tokens["c_ada"], tokens["ann"], admin):
        assert _asgi("POST", "/threads/t1/state", token, body) == (403, False)
    assert _asgi("POST", "/threads/t1/state", None, body) == (401, False)


def test_langgraph_api_state_writes_are_refused_for_everyone_and_metadata_is_for_admins():
    admin = {**ANN, "roles": ["admin"]}
    for who in (ADA, ANN, admin):
        assert _status(A.on_thread_update(_ctx(who, "update"), {"thread_id": "t1"})) == 403
    assert asyncio.run(A.on_thread_update(_ctx(admin, "update"), {"thread_id": "t1", "metadata": {"x": 1}})) == \
        {"tenant_id": "t_demo"}
    assert asyncio.run(A.on_thread_update(_ctx(admin, "update"), {"thread_id": "t1", "action": "interrupt",
                                                                  "metadata": {"run_ids": ["r1"]}})) == \
        {"tenant_id": "t_demo"}
    assert _status(A.on_thread_update(_ctx(ANN, "update"), {"thread_id": "t1", "metadata": {"x": 1}})) == 403


@pytest.mark.parametrize("method, path, body", [
    ("POST", "/threads/t1/runs/r1/cancel", None),
    ("PATCH", "/threads/t1/runs/r1", {"status": "interrupted"}),
    ("DELETE", "/threads/t1/runs/r1", None),
])
def test_aegra_routes_that_write_a_thread_outside_a_run_are_for_admins(tokens, store, method, path, body):
    store.add_operator("ida", "t_demo", ["admin"])
    admin = store.issue_token("operator", "ida", "t_demo")[1]
    assert _asgi(method, path, tokens["c_ada"], body) == (403, False)
    assert _asgi(method, path, tokens["ann"], body) == (403, False)  # an approver is not an admin
    assert _asgi(method, path, None, body) == (401, False)
    assert _asgi(method, path, admin, body) == (200, True)


def test_aegra_state_reads_and_other_routes_pass(tokens):
    assert _asgi("POST", "/threads/t1/state", tokens["c_ada"], {"subgraphs": False}) == (200, True)
    assert _asgi("GET", "/threads/t1/state", tokens["c_ada"]) == (200, True)
    assert _asgi("POST", "/threads/t1/history", tokens["c_ada"], {"limit": 3}) == (200, True)


def test_a_thread_copy_is_refused():
    # the LangGraph API asks threads.create with the new thread id alone when it copies a thread
    assert _status(A.on_thread_create(_ctx(ADA), {"thread_id": "0b6c…"})) == 403
    assert _status(A.on_thread_create(_ctx({**ANN, "roles": ["admin"]}), {"thread_id": "0b6c…"})) == 403
