"""``switchboard serve`` for tests: launch it on free loopback ports over a database the caller made, with principals
and bearer tokens issued in its business store first, and read back what the HTTP answers and the ledger say.

* :func:`launched` — a context manager: ``switchboard serve --instances N --port P --db URL [extra…]`` in a process
  group of its own, started once per test module (a module-scoped fixture), stopped with SIGTERM (SIGKILL after 30 s).
* :class:`Served` — the running launcher: ``client(who, instance)`` (an official ``langgraph_sdk`` sync client with
  that principal's token), ``http(who, method, path, body)`` (raw status and JSON body, for what the SDK hides), the
  business store.
* :func:`attack_customers` — customers of their own (one card, a refund that one approver decides and one that
  needs two) so that every attack starts on a fresh paused thread and its ledger is its own.
* :func:`paid` / :func:`credits` — what the ledger says a refund received: executed refunds and credit transactions.
* :func:`hitl_story` — an approval decided over the served API in LangChain's human-in-the-loop shape, the same story
  on every server (``langgraph dev``, an engine).

Nothing here is imported by the desk itself; the tests that use it are marked ``postgres``/``subprocess``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Served", "launched", "status_of", "interrupts", "free_ports", "is_free", "attack_customers",
           "AttackCustomer", "paid", "credits", "START_LIMIT_S", "NOTE", "OPERATOR_ONLY", "new_transaction", "leaks",
           "langgraph_dev", "offline_env", "stop_group", "hitl_story"]

#: Seconds ``switchboard serve`` may take until every instance answers (migrations and N engine start-ups).
START_LIMIT_S = 240


def is_free(port: int) -> bool:
    """Nothing listens on ``127.0.0.1:port``."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def free_ports(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports. Raises AssertionError after 50 tries."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = s.getsockname()[1]
        if first + n < 65535 and all(is_free(first + i) for i in range(n)):
            return first
    raise AssertionError("no free consecutive ports")


def status_of(fn: Callable[[], Any]) -> int | str:
    """The HTTP status a ``langgraph_sdk`` call ended with: 200 when it returned, else the error's status code (or the
    exception's class name when it carries none)."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the SDK raises httpx errors carrying the response
        code = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
        return int(code) if code else type(exc).__name__
    return 200


def interrupts(state: dict) -> list:
    """The pending interrupts of a thread state (``GET /threads/{id}/state``)."""
    return [i for t in state.get("tasks") or [] for i in t.get("interrupts") or []]


@dataclass(frozen=True)
class AttackCustomer:
    """A customer made by :func:`attack_customers`: ``id``, ``one`` (a transaction whose refund one approver decides)
    and ``two`` (one whose refund needs two distinct approvers)."""

    id: str
    one: str
    two: str


def attack_customers(store: Any, n: int, tenant: str = "t_demo", prefix: str = "c_atk") -> list[AttackCustomer]:
    """Add ``n`` identity-verified customers ``<prefix>00``… to ``store`` (idempotent), each with an active card and two
    posted card payments 3 days old: 23.80 GBP (above the auto-approval limit: one approver, ``policies.risk``) and
    600.00 GBP (above 500.00: two approvers)."""
    from datetime import timedelta

    from checkpoints.business import iso

    when = iso(store.now() - timedelta(days=3))
    out, customers, cards, txs = [], [], [], []
    for i in range(n):
        cid = f"{prefix}{i:02d}"
        digits = f"{zlib.crc32(prefix.encode()) % 90 + 10}{i:02d}"
        one, two = f"tx_9{digits}1", f"tx_9{digits}2"
        customers.append({"id": cid, "tenant_id": tenant, "name": f"Attack {i}", "email": f"{cid}@example.com",
                          "flags": json.dumps({"plan": "standard", "identity_verified": True, "country": "GB"})})
        cards.append({"id": f"card_{cid}", "customer_id": cid, "last4": f"{i:04d}", "status": "active",
                      "kind": "physical"})
        for tx, amount in ((one, 2380), (two, 60000)):
            txs.append({"id": tx, "customer_id": cid, "card_id": f"card_{cid}", "merchant": "Corner Shop",
                        "amount_minor": amount, "currency": "GBP", "kind": "card_payment", "status": "posted",
                        "created_at": when, "reference": None})
        out.append(AttackCustomer(cid, one, two))
    store.insert_rows({"customers": customers, "cards": cards, "transactions": txs})
    return out


def paid(store: Any, customer_id: str) -> list[Any]:
    """The customer's executed refunds."""
    return [r for r in store.list_refunds(customer_id) if r.status == "executed"]


def credits(store: Any, customer_id: str) -> list[Any]:
    """The customer's refund credits (``tx_<refund id>`` transactions: what the money path paid out)."""
    return [t for t in store.list_transactions(customer_id, limit=200, kind="transfer_in")
            if t.id.startswith("tx_rf_")]


class Served:
    """A running launcher: ``proc``, first ``port``, database ``url``, ``tokens`` by principal, output file ``out``."""

    def __init__(self, proc: subprocess.Popen, port: int, url: str, tokens: dict[str, str], out: Path):
        self.proc, self.port, self.url, self.tokens, self.out = proc, port, url, tokens, out

    def base(self, instance: int = 0) -> str:
        return f"http://127.0.0.1:{self.port + instance}"

    def client(self, who: str, instance: int = 0) -> Any:
        """A ``langgraph_sdk`` sync client with ``who``'s bearer token."""
        from langgraph_sdk import get_sync_client

        return get_sync_client(url=self.base(instance), headers={"Authorization": f"Bearer {self.tokens[who]}"})

    def http(self, who: str | None, method: str, path: str, body: Any = None, instance: int = 0,
             timeout: float = 120) -> tuple[int, Any]:
        """``(status, parsed JSON body or the raw text)`` of one request with ``who``'s token (None: no token)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if who is not None:
            headers["Authorization"] = f"Bearer {self.tokens[who]}"
        req = urllib.request.Request(self.base(instance) + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # loopback URL we built
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return status, json.loads(raw or b"null")
        except ValueError:
            return status, raw.decode("utf-8", "replace")

    @property
    def store(self) -> Any:
        from checkpoints.business import open_store

        return open_store(self.url, seed=False)


@contextmanager
def launched(url: str, tmp: Path, *extra: str, instances: int = 2,
             operators: Sequence[tuple[str, str, Sequence[str]]] = (("ann", "t_demo", ("approver",)),),
             customers: Sequence[tuple[str, str]] = (("c_ada", "t_demo"), ("c_bob", "t_demo")),
             setup: Callable[[Any], None] | None = None) -> Iterator[Served]:
    """``switchboard serve --instances N [extra…]`` on free loopback ports over the database ``url`` (fresh, made by
    the caller): ``setup(store)`` runs first (e.g. :func:`attack_customers`), then ``operators`` (name, tenant, roles)
    are added and tokens issued for them and for ``customers`` (id, tenant), keyed by id. Stopped (SIGTERM to the
    process group, SIGKILL after 30 s) afterwards. Raises AssertionError when the launcher exits or is not serving
    within :data:`START_LIMIT_S` seconds (with the end of its output)."""
    from checkpoints.business import open_store

    store = open_store(url)
    if setup is not None:
        setup(store)
    for name, tenant, roles in operators:
        store.add_operator(name, tenant, list(roles))
    tokens = {pid: store.issue_token("customer", pid, tenant)[1] for pid, tenant in customers}
    tokens.update({name: store.issue_token("operator", name, tenant)[1] for name, tenant, _ in operators})
    port = free_ports(instances)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_", "OPENAI_"))}
    env.update(SWITCHBOARD_HOME=str(tmp / "home"), PYTHONUNBUFFERED="1")
    out = tmp / "serve.out"
    with out.open("w") as sink:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "switchboard"), "serve", "--instances",
                                 str(instances), "--port", str(port), "--db", url, *extra], cwd=tmp, env=env,
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_LIMIT_S
        while f"serving {instances} instance" not in out.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
            time.sleep(0.3)
        yield Served(proc, port, url, tokens, out)
    finally:
        stop_group(proc, 30)


def stop_group(proc: subprocess.Popen, wait_s: float) -> None:
    """Stop ``proc``'s process group: SIGTERM, then SIGKILL when it has not exited after ``wait_s`` seconds."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def offline_env(home: Path) -> dict[str, str]:
    """The environment of a local server that sends nothing anywhere: no LangSmith, no OpenAI, no analytics or
    version check; ``SWITCHBOARD_HOME=home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_", "OPENAI_"))}
    env.update(LANGGRAPH_CLI_NO_ANALYTICS="1", LANGGRAPH_NO_VERSION_CHECK="true", LANGSMITH_TRACING="false",
               SWITCHBOARD_HOME=str(home), PYTHONUNBUFFERED="1")
    return env


@contextmanager
def langgraph_dev(tmp: Path, home: Path, repo: Path, limit_s: float = START_LIMIT_S) -> Iterator[str]:
    """``langgraph dev`` (in-memory server, ``repo``'s langgraph.json) on a free loopback port with ``home`` as
    SWITCHBOARD_HOME (its business store and event log: the caller seeds them first); yields the base URL. Its output
    goes to ``tmp/server.log``. Stopped with SIGTERM to its process group (SIGKILL after 20 s). Raises AssertionError
    when it exits or does not answer ``/ok`` within ``limit_s`` seconds (with the end of its log)."""
    # langgraph.json names the auth module as "./graph/service/auth.py" (relative to the server's working directory); a link
    # keeps the server's in-memory state out of the repository
    link = tmp / "graph"
    if not link.exists():
        link.symlink_to(repo / "graph")
    port = free_ports(1)
    log_path = tmp / "server.log"
    base = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "langgraph"), "dev", "--config",
                                 str(repo / "langgraph.json"), "--host", "127.0.0.1", "--port", str(port),
                                 "--no-browser", "--no-reload"], cwd=tmp, env=offline_env(home), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + limit_s
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{base}/ok", timeout=2) as resp:
                    if resp.status == 200 and json.loads(resp.read() or b"null").get("ok") is True:
                        break
            except (OSError, ValueError):
                pass
            time.sleep(0.25)
        yield base
    finally:
        stop_group(proc, 20)


#: An approver's decision note: operators may read it, no customer response may carry it.
NOTE = "internal: the receipt looks edited; checked with the fraud desk"
#: What only operators read: none of it may reach a customer's token, in any response.
OPERATOR_ONLY = (NOTE, "operator:ann", "risk_flags", "approvals_required", "handoff_path", "tool_calls", "task_id",
                 "langgraph_auth_user", "decided_by")


def new_transaction(home_or_url: Any, tx_id: str, amount_minor: int, customer: str = "c_ada") -> str:
    """A card payment of ``customer`` (``amount_minor`` pence, GBP, at Tesco) added to the business store of a home
    folder (its ``business.db``) or a database URL; returns ``tx_id``. The demo bank has one refundable payment of
    Ada's above the auto-approval limit; a test that needs more adds them with this."""
    from datetime import UTC, datetime

    from checkpoints.business import open_store

    target = home_or_url / "business.db" if isinstance(home_or_url, Path) else home_or_url
    open_store(target).insert_rows({"transactions": [{
        "id": tx_id, "customer_id": customer, "card_id": "card_ada_phys" if customer == "c_ada" else "card_bob_phys",
        "merchant": "Tesco", "amount_minor": amount_minor, "currency": "GBP", "kind": "card_payment",
        "status": "posted", "created_at": datetime.now(UTC).isoformat(), "reference": None}]})
    return tx_id


def leaks(doc: Any) -> list[str]:
    """The :data:`OPERATOR_ONLY` words found anywhere in the JSON text of ``doc`` ([] when none)."""
    text = json.dumps(doc, default=str)
    return [w for w in OPERATOR_ONLY if w in text]


#: LangChain's HITL decisions (``langchain.agents.middleware.human_in_the_loop``) as an approval UI sends them.
HITL_APPROVE = {"decisions": [{"type": "approve"}]}


def hitl_story(client: Callable[[str], Any], store: Any, one: str, two: str, customer: str = "c_ada",
               second_approver: str = "ben", operator_reads_threads: bool = True) -> None:
    """Over a served API, with ``client(who)`` a ``langgraph_sdk`` client of principal ``who`` and ``store`` the
    server's business store: the customer's refund of transaction ``one`` (one approver) pauses with an interrupt that
    carries no action for the customer and is a valid LangChain ``HITLRequest`` for the operator (read from the
    thread's state when ``operator_reads_threads``; Aegra shows a thread only to its creator, so there it is checked
    in the operator's own run output below); ``edit``, ``respond`` and two decisions are refused (422) and the
    customer's HITL approve (403), the thread unchanged; ann's HITL approve pays once and a second one is refused. Then
    the refund of ``two`` (which must need two approvers): ann's HITL approve keeps it paused (its output: the
    interrupt as she reads it), ann again is refused, ``second_approver``'s ``{"decision": "approve"}`` pays it once.
    Raises AssertionError at the first difference."""
    from langchain.agents.middleware.human_in_the_loop import HITLRequest
    from pydantic import TypeAdapter

    me, ann = client(customer), client("ann")

    def check_request(value: dict, tx: str) -> None:
        TypeAdapter(HITLRequest).validate_python(value)
        assert value["review_configs"] == [{"action_name": "refund", "allowed_decisions": ["approve", "reject"]}], value
        assert value["action_requests"][0]["args"]["transaction_id"] == tx and value["kind"] == "refund_approval"

    def paused(tx: str) -> tuple[str, str]:
        tid = me.threads.create()["thread_id"]
        me.runs.wait(tid, "switchboard", input={"messages": [{"role": "user", "content": f"I want a refund for {tx}"}]})
        [mine] = interrupts(me.threads.get_state(tid))
        assert "action_requests" not in mine["value"] and mine["value"]["transaction_id"] == tx, mine
        if operator_reads_threads:
            [pending] = interrupts(ann.threads.get_state(tid))
            check_request(pending["value"], tx)
        return tid, mine["value"]["refund_id"]

    def resume(who: str, tid: str, value: Any) -> int | str:
        return status_of(lambda: client(who).runs.wait(tid, "switchboard", command={"resume": value}))

    tid, refund_id = paused(one)
    before = me.threads.get_state(tid)["checkpoint"]
    for bad in ({"decisions": [{"type": "edit", "edited_action": {"name": "refund", "args": {}}}]},
                {"decisions": [{"type": "respond", "message": "done"}]}, {"decisions": [{"type": "approve"}] * 2}):
        assert resume("ann", tid, bad) == 422, bad
    assert resume(customer, tid, HITL_APPROVE) == 403
    assert me.threads.get_state(tid)["checkpoint"] == before and store.load_refund(refund_id).status == "requested"
    done = ann.runs.wait(tid, "switchboard", command={"resume": HITL_APPROVE})
    assert "paid back" in done["outcome"]["text"], done
    assert [(d.approver, d.decision) for d in store.list_decisions(done["pending_approval"]["task_id"])] == \
        [("operator:ann", "approve")]
    assert resume("ann", tid, HITL_APPROVE) != 200
    assert len([r for r in paid(store, customer) if r.transaction_id == one]) == 1

    tid, refund_id = paused(two)
    again = ann.runs.wait(tid, "switchboard", command={"resume": HITL_APPROVE})
    [waiting] = again["__interrupt__"]
    check_request(waiting["value"], two)
    assert waiting["value"]["approvals_required"] == 2 and waiting["value"]["approvals"] == ["operator:ann"], waiting
    assert resume("ann", tid, HITL_APPROVE) == 403  # four eyes: the same approver twice
    assert resume("ann", tid, {"decision": "approve"}) == 403  # ... in the other shape too
    assert resume("ann", tid, {"decision": "approve", "decision_id": "dc_fresh"}) == 403  # ... under a fresh key
    assert resume(second_approver, tid, {"decisions": [{"type": "APPROVE"}]}) == 422  # no loose spelling of a type
    done = client(second_approver).runs.wait(tid, "switchboard", command={"resume": {"decision": "approve"}})
    assert "paid back" in done["outcome"]["text"], done
    assert [r.id for r in paid(store, customer) if r.transaction_id == two] == [refund_id]
