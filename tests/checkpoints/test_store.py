"""Tests of the business store (checkpoints/business/repository.py) on both engines: seeding, reads,
compare-and-swap writes, idempotent side effects, task ownership fencing, and races between threads and between
processes on one database. Every test taking ``store`` or ``business_url`` runs on SQLite and, when
SWITCHBOARD_TEST_POSTGRES is set, on a fresh PostgreSQL database (marker ``postgres``)."""

from __future__ import annotations

import json
import multiprocessing
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from checkpoints.business import (
    BusinessRuleError,
    BusinessStore,
    NotFoundError,
    OwnershipError,
    PaymentNotAuthorized,
    StaleVersionError,
    StoreError,
    default_store_path,
    iso,
    open_store,
    parse_iso,
)
from checkpoints.business import schema as tables
from graph.contracts.errors import SwitchboardError
from nodes.testing.ledger import approve_refund
from tests import store_workers

REF = datetime(2025, 3, 14, 12, 0, tzinfo=UTC)


@pytest.fixture()
def store(business_url: str) -> BusinessStore:
    s = BusinessStore(business_url, now=lambda: REF)
    assert s.seed_demo() > 0
    return s


def _count(store: BusinessStore, sql: str, **params: object) -> int:
    with store.engine.connect() as conn:
        return conn.execute(text(sql), params).scalar_one()


# -- plumbing --------------------------------------------------------------------------------------


def test_errors_are_switchboard_errors() -> None:
    assert issubclass(StoreError, SwitchboardError)
    assert issubclass(NotFoundError, BusinessRuleError)


def test_sqlite_wal_mode_and_busy_timeout(tmp_path: Path) -> None:
    s = BusinessStore(tmp_path / "business.db")
    with s.engine.connect() as conn:  # the store's own pooled connections
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_engine_is_shared_per_url(business_url: str) -> None:
    a, b = BusinessStore(business_url), BusinessStore(business_url)
    assert a.engine is b.engine


# -- schema and seed -------------------------------------------------------------------------------


def test_seed_is_idempotent(store: BusinessStore) -> None:
    names = ["customers", "cards", "transactions", "refunds", "transfers"]
    before = {t: _count(store, f"SELECT COUNT(*) FROM {t}") for t in names}
    assert store.seed_demo() == 0
    assert store.seed_demo(REF + timedelta(days=30)) == 0
    after = {t: _count(store, f"SELECT COUNT(*) FROM {t}") for t in names}
    assert before == after
    assert before == {"customers": 2, "cards": 4, "transactions": 12, "refunds": 1, "transfers": 3}
    # timestamps of the first seed are kept
    assert store.get_transaction("c_ada", "tx_1008").created_at == "2025-03-12T08:19:00Z"


def test_seed_contents(store: BusinessStore) -> None:
    ada = store.get_customer("c_ada")
    assert ada is not None and ada.name == "Ada Lovelace" and ada.tenant_id == "t_demo"
    assert store.get_customer("c_ada", tenant_id="t_other") is None
    cards = {c.last4: c for c in store.list_cards("c_ada")}
    assert cards["4242"].status == "active" and cards["4242"].kind == "physical"
    assert any(c.kind == "virtual" for c in cards.values())
    assert sum(c.status == "blocked" for c in cards.values()) == 1
    txs = store.list_transactions("c_ada", limit=50)
    statuses = {t.status for t in txs}
    assert {"posted", "pending", "declined"} <= statuses
    assert {"atm", "fee", "transfer_out", "card_payment"} <= {t.kind for t in txs}
    assert all(parse_iso(t.created_at) <= REF for t in txs)
    assert [t.created_at for t in txs] == sorted((t.created_at for t in txs), reverse=True)
    refunds = store.list_refunds("c_ada")
    assert [(r.id, r.status, r.transaction_id) for r in refunds] == [("rf_5001", "requested", "tx_1005")]
    assert {t.status for t in store.list_transfers("c_ada")} == {"completed", "pending"}
    assert len(store.list_transactions("c_ada", limit=3)) == 3
    assert {t.kind for t in store.list_transactions("c_ada", kind="fee")} == {"fee"}
    with pytest.raises(ValueError):
        store.list_transactions("c_ada", kind="lottery")


def test_open_store_default_path_seeds_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / "business.db"
    s = open_store()
    assert s.path == tmp_path / "home" / "business.db" and s.path.exists()
    assert s.get_customer("c_ada") is not None
    assert open_store(f"sqlite:///{tmp_path / 'home' / 'business.db'}").path == s.path


def test_open_store_never_reseeds(business_url: str) -> None:
    s = open_store(business_url)
    assert s.get_transfer("c_ada", "tr_3002") is not None
    with s.engine.begin() as conn:
        conn.execute(text("DELETE FROM transfers WHERE id='tr_3002'"))
    s2 = open_store(business_url)  # a later open never re-seeds: deleted demo rows stay deleted
    assert s2.get_transfer("c_ada", "tr_3002") is None
    assert s2.get_customer("c_ada") is not None


def test_open_store_without_seed_is_empty(business_url: str) -> None:
    assert open_store(business_url, seed=False).is_empty()


def test_memory_path_refused() -> None:
    for target in (":memory:", "sqlite://", "sqlite:///:memory:"):
        with pytest.raises(ValueError):
            BusinessStore(target)


# -- reads -----------------------------------------------------------------------------------------


def test_duplicate_charge_detected(store: BusinessStore) -> None:
    pairs = store.find_duplicate_charges("c_ada")
    assert [(o.id, d.id) for o, d in pairs] == [("tx_1007", "tx_1008")]
    o, d = pairs[0]
    assert (o.merchant, o.amount_minor, o.currency) == ("Blue Bottle Coffee", 450, "GBP")
    assert o.card_id == d.card_id
    assert o.created_at[:10] == d.created_at[:10]
    assert store.find_duplicate_charges("c_bob") == []


def test_duplicate_rules_window_and_status(store: BusinessStore) -> None:
    cols = ("id", "customer_id", "card_id", "merchant", "amount_minor", "currency", "kind", "status", "created_at",
            "reference")
    rows = [  # same as tx_1007 but > 24 h later: not a duplicate
        ("tx_9001", "c_ada", "card_ada_phys", "Blue Bottle Coffee", 450, "GBP", "card_payment", "posted",
         "2025-03-13T09:00:00Z", None),
        # same merchant/amount, pending: ignored
        ("tx_9002", "c_ada", "card_ada_phys", "Tesco", 2380, "GBP", "card_payment", "pending",
         "2025-02-22T12:05:00Z", None),
        # same merchant/amount within 24 h but on another card: not a duplicate
        ("tx_9003", "c_ada", "card_ada_virt", "Tesco", 2380, "GBP", "card_payment", "posted",
         "2025-02-22T12:10:00Z", None),
    ]
    with store.engine.begin() as conn:
        conn.execute(tables.transactions.insert(), [dict(zip(cols, r, strict=True)) for r in rows])
    assert [(o.id, d.id) for o, d in store.find_duplicate_charges("c_ada")] == [("tx_1007", "tx_1008")]


def test_reads_are_scoped_to_the_customer(store: BusinessStore) -> None:
    assert store.get_transaction("c_ada", "tx_2001") is None
    assert store.get_transaction("c_bob", "tx_2001") is not None
    assert store.get_refund("c_bob", "rf_5001") is None
    assert store.get_refund("c_ada", "rf_5001") is not None
    assert store.get_transfer("c_bob", "tr_3002") is None
    assert store.get_card("c_bob", "card_ada_phys") is None
    assert all(t.customer_id == "c_bob" for t in store.list_transactions("c_bob"))


def test_refunds_in_last_days(store: BusinessStore) -> None:
    assert [r.id for r in store.refunds_in_last_days("c_ada", 30)] == ["rf_5001"]  # created 7 days ago
    assert store.refunds_in_last_days("c_ada", 5) == []


def test_refunds_with_equal_times_keep_insertion_order(store: BusinessStore) -> None:
    # the fixed clock gives every new refund the same created_at: insertion order breaks the tie
    ids = [store.request_refund("c_ada", tx, amount, "GBP", "x", f"k-{tx}").id
           for tx, amount in (("tx_1001", 2380), ("tx_1007", 450), ("tx_1008", 450), ("tx_1003", 150))]
    assert [r.id for r in store.list_refunds("c_ada")][:4] == ids[::-1]
    assert [r.id for r in store.refunds_in_last_days("c_ada", 1)] == ids[::-1]
    assert [r.id for r in store.refunds_for_transaction("c_ada", "tx_1008")] == [ids[2]]


# -- refunds: request ------------------------------------------------------------------------------


def test_request_refund_idempotent_by_key(store: BusinessStore) -> None:
    before = _count(store, "SELECT COUNT(*) FROM refunds")
    first = store.request_refund("c_ada", "tx_1008", 450, "GBP", "duplicate charge", "k-1")
    again = store.request_refund("c_ada", "tx_1008", 450, "GBP", "duplicate charge", "k-1")
    assert first == again
    assert first.status == "requested" and first.id.startswith("rf_") and first.version == 1
    assert _count(store, "SELECT COUNT(*) FROM refunds") == before + 1
    assert store.find_refund_by_key("k-1") == first
    # another key for the same transaction: already requested
    with pytest.raises(BusinessRuleError, match="already has refund"):
        store.request_refund("c_ada", "tx_1008", 450, "GBP", "again", "k-2")
    # the same key for another transaction is refused, not silently replayed
    with pytest.raises(BusinessRuleError, match="already used for another refund") as refused:
        store.request_refund("c_ada", "tx_1001", 2380, "GBP", "x", "k-1")
    assert "k-1" not in str(refused.value)  # shown to the customer: no internal key


def test_request_refund_business_rules(store: BusinessStore) -> None:
    with pytest.raises(NotFoundError):
        store.request_refund("c_ada", "tx_2001", 620, "GBP", "not mine", "k-bob")
    with pytest.raises(BusinessRuleError, match="rf_5001"):
        store.request_refund("c_ada", "tx_1005", 5999, "GBP", "again", "k-5")
    with pytest.raises(BusinessRuleError, match="declined"):
        store.request_refund("c_ada", "tx_1010", 1999, "EUR", "declined", "k-10")
    with pytest.raises(BusinessRuleError, match="^tx_1002 is an ATM withdrawal; only card payments and fees"):
        store.request_refund("c_ada", "tx_1002", 10000, "GBP", "atm", "k-2")
    with pytest.raises(BusinessRuleError, match="between"):
        store.request_refund("c_ada", "tx_1001", 2381, "GBP", "too much", "k-a")
    with pytest.raises(BusinessRuleError, match="GBP"):
        store.request_refund("c_ada", "tx_1001", 100, "EUR", "wrong currency", "k-c")
    assert _count(store, "SELECT COUNT(*) FROM refunds") == 1
    assert store.refund_eligibility("c_ada", "tx_1008") == (True, "eligible")
    assert store.refund_eligibility("c_ada", "tx_2001")[0] is False


@pytest.mark.parametrize(("tx", "phrase"), [("tx_1002", "is an ATM withdrawal;"), ("tx_1004", "is an outgoing transfer;"),
                                           ("tx_1006", "is a top-up;")])
def test_refusals_name_the_kind_in_words_with_its_article(store: BusinessStore, tx: str, phrase: str) -> None:
    """The store's refusals reach the customer as they are: a kind in words with the right article, never ``a atm``
    or ``transfer_out``."""
    eligible, reason = store.refund_eligibility("c_ada", tx)
    assert not eligible and reason.startswith(f"{tx} {phrase}"), reason
    assert "_" not in reason.removeprefix(tx) and " a atm" not in reason, reason


def test_every_transaction_kind_has_words_with_an_article() -> None:
    from checkpoints.business.records import TX_KIND_PHRASES, TX_KINDS

    assert set(TX_KIND_PHRASES) == set(TX_KINDS)
    for phrase in TX_KIND_PHRASES.values():
        article, first = phrase.split(" ", 2)[:2]
        assert article == ("an" if first[0].lower() in "aeiou" else "a"), phrase


def test_refund_window(business_url: str) -> None:
    clock = {"now": REF}
    s = BusinessStore(business_url, now=lambda: clock["now"])
    s.seed_demo()
    clock["now"] = REF + timedelta(days=200)
    eligible, reason = s.refund_eligibility("c_ada", "tx_1008")
    assert not eligible and "older than" in reason


def _race(n: int, fn) -> tuple[list[object], list[BaseException]]:
    barrier = threading.Barrier(n)
    results: list[object] = []
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        barrier.wait()
        try:
            results.append(fn(i))
        except BaseException as exc:  # noqa: BLE001 - collected and asserted on by the caller
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


def test_request_refund_race_same_key_creates_one(store: BusinessStore) -> None:
    results, errors = _race(8, lambda i: store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", "race-key"))
    assert errors == []
    assert len(results) == 8 and len({r.id for r in results}) == 1  # type: ignore[attr-defined]
    assert _count(store, "SELECT COUNT(*) FROM refunds WHERE transaction_id='tx_1008'") == 1


def test_request_refund_race_other_keys_one_active(store: BusinessStore) -> None:
    results, errors = _race(6, lambda i: store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", f"key-{i}"))
    assert len(results) == 1 and len(errors) == 5
    assert all(isinstance(e, BusinessRuleError) and "already has refund" in str(e) for e in errors)
    assert _count(store, "SELECT COUNT(*) FROM refunds WHERE transaction_id='tx_1008'") == 1


# -- refunds: CAS status ---------------------------------------------------------------------------


def test_set_refund_status_cas(store: BusinessStore) -> None:
    approved = store.set_refund_status("rf_5001", 1, "approved")
    assert (approved.status, approved.version) == ("approved", 2)
    with pytest.raises(StaleVersionError):
        store.set_refund_status("rf_5001", 1, "cancelled")  # decided on a stale read
    assert store.get_refund("c_ada", "rf_5001").status == "approved"  # nothing written
    with pytest.raises(BusinessRuleError):
        store.set_refund_status("rf_5001", 2, "requested")  # illegal transition
    with pytest.raises(BusinessRuleError):
        store.set_refund_status("rf_5001", 2, "executed")  # only execute_refund pays
    with pytest.raises(ValueError):
        store.set_refund_status("rf_5001", 2, "paid")
    with pytest.raises(NotFoundError):
        store.set_refund_status("rf_nope", 1, "approved")


def test_set_refund_status_race_one_cas_wins(store: BusinessStore) -> None:
    results, errors = _race(6, lambda i: store.set_refund_status("rf_5001", 1, ("approved", "cancelled")[i % 2]))
    assert len(results) == 1 and len(errors) == 5
    assert all(isinstance(e, StaleVersionError) for e in errors)
    assert store.get_refund("c_ada", "rf_5001").version == 2


# -- refunds: execution exactly once ---------------------------------------------------------------


def test_execute_refund_exactly_once(store: BusinessStore) -> None:
    rf = store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", "req-1")
    approve_refund(store, rf.id)
    first = store.execute_refund(rf.id, "exec-1")
    second = store.execute_refund(rf.id, "exec-1")
    assert first["replayed"] is False and second["replayed"] is True
    assert {k: v for k, v in first.items() if k != "replayed"} == \
        {k: v for k, v in second.items() if k != "replayed"}
    assert first["status"] == "executed" and first["amount_minor"] == 450
    assert store.get_refund("c_ada", rf.id).status == "executed"
    assert _count(store, "SELECT COUNT(*) FROM transactions WHERE reference=:r", r=rf.id) == 1
    assert _count(store, "SELECT COUNT(*) FROM side_effects") == 1
    assert store.side_effect_result("exec-1")["refund_id"] == rf.id
    assert store.side_effect_result("never") is None
    with pytest.raises(BusinessRuleError, match="already paid"):
        store.execute_refund(rf.id, "exec-other-key")
    assert _count(store, "SELECT COUNT(*) FROM side_effects") == 1  # the refused key was not kept


def test_execute_refund_refuses_cancelled_and_rejected(store: BusinessStore) -> None:
    store.set_refund_status("rf_5001", 1, "cancelled")
    with pytest.raises(BusinessRuleError, match="cancelled"):
        store.execute_refund("rf_5001", "exec-c")
    rf = store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", "req-r")
    store.set_refund_status(rf.id, 1, "rejected")
    with pytest.raises(BusinessRuleError, match="rejected"):
        store.execute_refund(rf.id, "exec-r")
    assert _count(store, "SELECT COUNT(*) FROM side_effects") == 0
    with pytest.raises(NotFoundError):
        store.execute_refund("rf_nope", "exec-n")


def test_execute_refund_threads_race_same_key(store: BusinessStore) -> None:
    rf = store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", "req-race")
    approve_refund(store, rf.id)
    results, errors = _race(4, lambda i: store.execute_refund(rf.id, "exec-race"))
    assert errors == []
    assert sorted(r["replayed"] for r in results) == [False, True, True, True]  # type: ignore[index]
    assert _count(store, "SELECT COUNT(*) FROM transactions WHERE reference=:r", r=rf.id) == 1


def test_execute_refund_threads_race_other_keys(store: BusinessStore) -> None:
    rf = store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", "req-race2")
    approve_refund(store, rf.id)
    results, errors = _race(4, lambda i: store.execute_refund(rf.id, f"exec-{i}"))
    assert len(results) == 1 and results[0]["replayed"] is False  # type: ignore[index]
    assert len(errors) == 3 and all("already paid" in str(e) for e in errors)
    assert _count(store, "SELECT COUNT(*) FROM transactions WHERE reference=:r", r=rf.id) == 1


# -- races between processes -----------------------------------------------------------------------


def _run_processes(target, args_list: list[tuple]) -> list[object]:
    """Start one spawned process per args tuple; they wait on one event so they hit the database together."""
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, start, out)) for args in args_list]
    for p in procs:
        p.start()
    start.set()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return results


@pytest.mark.subprocess
def test_execute_refund_two_processes_race_same_key(store: BusinessStore, business_url: str) -> None:
    rf = store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", "req-proc")
    approve_refund(store, rf.id)
    results = _run_processes(store_workers.execute_refund, [(business_url, rf.id, "exec-proc")] * 2)
    assert sorted(results) == ["executed", "replayed"]
    assert _count(store, "SELECT COUNT(*) FROM transactions WHERE reference=:r", r=rf.id) == 1


@pytest.mark.subprocess
def test_execute_refund_two_processes_race_different_keys(store: BusinessStore, business_url: str) -> None:
    rf = store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", "req-proc2")
    approve_refund(store, rf.id)
    results = _run_processes(store_workers.execute_refund,
                             [(business_url, rf.id, "exec-a"), (business_url, rf.id, "exec-b")])
    assert sorted(r.split(":")[0] for r in results) == ["executed", "refused"]  # type: ignore[union-attr]
    assert _count(store, "SELECT COUNT(*) FROM transactions WHERE reference=:r", r=rf.id) == 1
    assert _count(store, "SELECT COUNT(*) FROM side_effects") == 1


@pytest.mark.subprocess
def test_decide_approval_two_processes_one_winner(store: BusinessStore, business_url: str) -> None:
    store.create_task("task-p", "thread-p", "refunds")
    store.update_task("task-p", 1, status="awaiting_approval")
    results = _run_processes(store_workers.decide_approval, [(business_url, "dc_alice", "alice", "approve"),
                                                  (business_url, "dc_bob", "bob", "reject")])
    winners = [d for d, won in results if won]  # type: ignore[misc]
    assert len(winners) == 1
    assert {d for d, _ in results} == {winners[0]}  # the loser sees the winner's decision  # type: ignore[misc]
    assert [d.id for d in store.list_decisions("task-p")] == winners
    expected = {"dc_alice": ("open", "approved"), "dc_bob": ("completed", "rejected")}[winners[0]]
    assert (store.get_task("task-p").status, store.load_refund("rf_5001").status) == expected


# -- cards -----------------------------------------------------------------------------------------


def test_freeze_card_idempotent_and_scoped(store: BusinessStore) -> None:
    first = store.freeze_card("c_ada", "card_ada_phys", "fz-1")
    assert (first["status"], first["previous_status"], first["replayed"]) == ("frozen", "active", False)
    assert store.get_card("c_ada", "card_ada_phys").status == "frozen"
    assert store.get_card("c_ada", "card_ada_phys").version == 2
    assert store.freeze_card("c_ada", "card_ada_phys", "fz-1")["replayed"] is True
    other_key = store.freeze_card("c_ada", "card_ada_phys", "fz-2")
    assert other_key["already_frozen"] is True and store.get_card("c_ada", "card_ada_phys").version == 2
    with pytest.raises(NotFoundError):
        store.freeze_card("c_bob", "card_ada_virt", "fz-3")
    with pytest.raises(BusinessRuleError, match="blocked"):
        store.freeze_card("c_ada", "card_ada_old", "fz-4")
    assert store.get_card("c_ada", "card_ada_virt").status == "active"
    assert store.side_effect_result("fz-3") is None and store.side_effect_result("fz-4") is None


def test_freeze_card_race_same_key(store: BusinessStore) -> None:
    results, errors = _race(4, lambda i: store.freeze_card("c_ada", "card_ada_virt", "fz-race"))
    assert errors == []
    assert sorted(r["replayed"] for r in results) == [False, True, True, True]  # type: ignore[index]
    assert store.get_card("c_ada", "card_ada_virt").version == 2


# -- tasks and ownership ---------------------------------------------------------------------------


def test_create_task_idempotent(store: BusinessStore) -> None:
    t1 = store.create_task("task-1", "thread-1", "billing")
    t2 = store.create_task("task-1", "thread-1", "refunds")
    assert t1 == t2
    assert (t1.status, t1.current_owner, t1.owner_version, t1.version) == ("open", "billing", 1, 1)
    assert store.get_task("task-1") == t1
    assert store.get_task("nope") is None


def test_update_task_cas(store: BusinessStore) -> None:
    store.create_task("task-1", "thread-1", "billing")
    t = store.update_task("task-1", 1, status="awaiting_approval")
    assert (t.status, t.version) == ("awaiting_approval", 2)
    with pytest.raises(StaleVersionError):
        store.update_task("task-1", 1, status="completed")
    assert store.get_task("task-1").status == "awaiting_approval"
    with pytest.raises(TypeError):
        store.update_task("task-1", 2, current_owner="risk")
    with pytest.raises(TypeError):
        store.update_task("task-1", 2)
    with pytest.raises(ValueError):
        store.update_task("task-1", 2, status="done")
    with pytest.raises(NotFoundError):
        store.update_task("nope", 1, status="completed")


def test_ownership_refuses_former_owner(store: BusinessStore) -> None:
    store.create_task("task-1", "thread-1", "billing")
    claimed = store.claim_task("task-1", "refunds", expected_owner_version=1)
    assert (claimed.current_owner, claimed.owner_version, claimed.version) == ("refunds", 2, 2)
    # billing still believes it owns the task at owner_version 1
    with pytest.raises(OwnershipError):
        store.claim_task("task-1", "billing", expected_owner_version=1)
    with pytest.raises(OwnershipError):
        store.update_task("task-1", 2, owner="billing", owner_version=1, status="completed")
    with pytest.raises(OwnershipError):
        store.update_task("task-1", 2, owner="billing", status="completed")
    assert store.get_task("task-1").status == "open"
    done = store.update_task("task-1", 2, owner="refunds", owner_version=2, status="completed")
    assert done.status == "completed"
    with pytest.raises(NotFoundError):
        store.claim_task("nope", "refunds", 1)


def test_claim_task_race_one_owner(store: BusinessStore) -> None:
    store.create_task("task-1", "thread-1", "triage")
    agents = ["billing", "refunds", "cards", "risk"]
    results, errors = _race(4, lambda i: store.claim_task("task-1", agents[i], expected_owner_version=1))
    assert len(results) == 1 and len(errors) == 3 and all(isinstance(e, OwnershipError) for e in errors)
    task = store.get_task("task-1")
    assert (task.current_owner, task.owner_version) == (results[0].current_owner, 2)  # type: ignore[attr-defined]


def test_record_decision(store: BusinessStore) -> None:
    store.create_task("task-1", "thread-1", "refunds")
    d1 = store.record_decision("task-1", "alice", "approve", "looks right", decision_id="dc_1")
    d2 = store.record_decision("task-1", "alice", "approve", "looks right", decision_id="dc_1")
    assert d1 == d2 and d1.decided_at == iso(REF)
    store.record_decision("task-1", "bob", "reject")
    store.record_decision("task-1", "carol", "cancel", decision_id="dc_0")  # sorts before dc_1 by id
    assert [d.decision for d in store.list_decisions("task-1")] == ["approve", "reject", "cancel"]
    with pytest.raises(ValueError):
        store.record_decision("task-1", "alice", "maybe")
    with pytest.raises(NotFoundError):
        store.record_decision("nope", "alice", "approve")


def test_decide_approval_once(store: BusinessStore) -> None:
    store.create_task("task-1", "thread-1", "refunds")
    with pytest.raises(NotFoundError, match="no decision"):
        store.decide_approval("task-1", "dc_early", "alice", "approve")  # not awaiting approval yet
    store.update_task("task-1", 1, status="awaiting_approval")
    d, won = store.decide_approval("task-1", "dc_a", "alice", "approve", "ok", refund_id="rf_5001")
    assert won and d.approver == "alice"
    assert (store.get_task("task-1").status, store.load_refund("rf_5001").status) == ("open", "approved")
    assert store.decide_approval("task-1", "dc_a", "alice", "approve", "ok", refund_id="rf_5001") == (d, True)
    late, won = store.decide_approval("task-1", "dc_b", "bob", "reject", refund_id="rf_5001")
    assert (late, won) == (d, False)
    assert store.load_refund("rf_5001").status == "approved"
    with pytest.raises(ValueError):
        store.decide_approval("task-1", "dc_c", "bob", "perhaps")
    with pytest.raises(NotFoundError):
        store.decide_approval("nope", "dc_d", "bob", "approve")


def test_decide_approval_threads_one_winner(store: BusinessStore) -> None:
    store.create_task("task-1", "thread-1", "refunds")
    store.update_task("task-1", 1, status="awaiting_approval")
    choices = ["approve", "reject", "cancel", "approve"]
    results, errors = _race(4, lambda i: store.decide_approval("task-1", f"dc_{i}", f"op{i}", choices[i],
                                                               refund_id="rf_5001"))
    assert errors == []
    assert sum(won for _, won in results) == 1  # type: ignore[misc]
    assert len({d.id for d, _ in results}) == 1  # type: ignore[misc]
    assert len(store.list_decisions("task-1")) == 1


def test_records_to_dict_json_safe(store: BusinessStore) -> None:
    for rec in [store.get_customer("c_ada"), store.list_cards("c_ada")[0],
                store.get_transaction("c_ada", "tx_1008"), store.get_refund("c_ada", "rf_5001"),
                store.list_transfers("c_ada")[0], store.create_task("t", "th", "billing")]:
        d = rec.to_dict()
        assert json.loads(json.dumps(d)) == d
        assert "seq" not in d
    assert store.get_customer("c_ada").to_dict()["flags"]["plan"] == "standard"


# -- refunds: the authority to pay is the store's own records ----------------------------------------


def _paid(store: BusinessStore, refund_id: str) -> int:
    return _count(store, "SELECT COUNT(*) FROM transactions WHERE reference=:r", r=refund_id)


def test_execute_refund_refuses_a_refund_without_a_recorded_decision(store: BusinessStore) -> None:
    rf = store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", "req-nodec")
    with pytest.raises(PaymentNotAuthorized, match="requested, not approved"):
        store.execute_refund(rf.id, "exec-nodec")
    store.set_refund_status(rf.id, 1, "approved")  # a status flipped by hand is no decision
    with pytest.raises(PaymentNotAuthorized, match="no task deciding it"):
        store.execute_refund(rf.id, "exec-nodec")
    task = store.create_task("task-nodec", "t", "refunds", refund_id=rf.id)
    with pytest.raises(PaymentNotAuthorized, match="no final approval"):
        store.execute_refund(rf.id, "exec-nodec")
    assert store.get_task(task.id).status == "open"
    assert _paid(store, rf.id) == 0 and store.side_effect_result("exec-nodec") is None


def test_the_recorded_rule_wins_over_a_callers_lower_count_of_approvers(store: BusinessStore) -> None:
    rf = store.request_refund("c_ada", "tx_1001", 2380, "GBP", "never arrived", "req-two")
    task = store.create_task("task-two", "t", "refunds", refund_id=rf.id)
    store.record_approval_rule(task.id, 2)
    store.update_task(task.id, store.get_task(task.id).version, status="awaiting_approval")
    first, won = store.decide_approval(task.id, "dc-1", "operator:ann", "approve", required_approvals=1)
    assert won and first.final is False  # the caller said one approver; the task records two
    assert store.load_refund(rf.id).status == "requested"
    with pytest.raises(PaymentNotAuthorized):
        store.execute_refund(rf.id, "exec-two")
    second, _ = store.decide_approval(task.id, "dc-2", "operator:ben", "approve", required_approvals=1)
    assert second.final is True
    assert store.execute_refund(rf.id, "exec-two")["replayed"] is False and _paid(store, rf.id) == 1


def test_an_automatic_approval_counts_only_where_the_risk_rules_recorded_one(store: BusinessStore) -> None:
    rf = store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", "req-auto")
    task = store.create_task("task-auto", "t", "refunds", refund_id=rf.id)
    store.record_approval_rule(task.id, 1)  # a human tier
    store.update_task(task.id, store.get_task(task.id).version, status="awaiting_approval")
    with pytest.raises(BusinessRuleError, match="needs a human approver"):
        store.decide_approval(task.id, f"auto:{rf.id}", "system:risk-policy", "approve", refund_id=rf.id)
    assert store.load_refund(rf.id).status == "requested"
    other = store.request_refund("c_ada", "tx_1003", 100, "GBP", "fee", "req-auto2")
    auto = store.create_task("task-auto2", "t", "refunds", refund_id=other.id)
    store.record_approval_rule(auto.id, 0)
    store.update_task(auto.id, store.get_task(auto.id).version, status="awaiting_approval")
    store.decide_approval(auto.id, f"auto:{other.id}", "system:risk-policy", "approve", refund_id=other.id)
    assert store.execute_refund(other.id, "exec-auto2")["replayed"] is False


def test_a_system_approval_never_stands_in_for_a_human_one(store: BusinessStore) -> None:
    """On a human tier a ``system:`` ref is no approver, even when the decision row says approve."""
    rf = store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", "req-sys")
    task = store.create_task("task-sys", "t", "refunds", refund_id=rf.id)
    store.record_approval_rule(task.id, 1)
    store.update_task(task.id, store.get_task(task.id).version, status="awaiting_approval")
    store.decide_approval(task.id, "dc-sys", "system:scheduler", "approve", refund_id=rf.id)
    with pytest.raises(PaymentNotAuthorized, match="needs 1 distinct approvers and has 0"):
        store.execute_refund(rf.id, "exec-sys")
    assert _paid(store, rf.id) == 0


def test_the_approval_rule_is_recorded_once(store: BusinessStore) -> None:
    task = store.create_task("task-rule", "t", "refunds", refund_id="rf_5001")
    assert store.get_task(task.id).approvals_required is None
    recorded = store.record_approval_rule(task.id, 2, "2025-03-15T12:00:00Z")
    assert (recorded.approvals_required, recorded.approval_deadline) == (2, "2025-03-15T12:00:00Z")
    assert store.record_approval_rule(task.id, 2).approvals_required == 2  # a re-run records nothing new
    with pytest.raises(BusinessRuleError, match="does not change"):
        store.record_approval_rule(task.id, 1)
    with pytest.raises(ValueError):
        store.record_approval_rule(task.id, 3)
    with pytest.raises(NotFoundError):
        store.record_approval_rule("task-nope", 1)
    assert store.get_task(task.id).approvals_required == 2


# -- when a refund was paid ----------------------------------------------------------------------------------------

def test_a_paid_refunds_date_is_found_however_many_credits_follow(store: BusinessStore) -> None:
    """The paid date of a refund is its credit's time, found by the credit's reference to the refund: 60 later credits
    on the account (other refunds, top-ups from a bank) used to push it out of the 50 newest ``transfer_in`` rows
    the refund view looked through, and the answer read "credited to your account on , so …"."""
    from nodes.embedded.playbook import _render_refund_status
    from nodes.tools import ToolContext, _refund_status

    rf = store.request_refund("c_ada", "tx_1008", 450, "GBP", "duplicate", "k-paid-date")
    approve_refund(store, rf.id)
    paid = store.execute_refund(rf.id, "k-paid-date/exec")
    later = [{"id": f"tx_in_{i}", "customer_id": "c_ada", "card_id": None, "merchant": "Transfer from Barclays",
              "amount_minor": 100, "currency": "GBP", "kind": "transfer_in", "status": "posted",
              "created_at": f"2025-03-{15 + i // 24:02d}T{i % 24:02d}:00:00Z", "reference": None} for i in range(60)]
    assert store.insert_rows({"transactions": later}) == 60
    result = _refund_status(store, ToolContext(customer_id="c_ada", tenant_id="t_demo", thread_id="t-paid"), rf.id)
    answer = _render_refund_status(result, "when will it arrive?")
    assert "credited to your account on 14 Mar, so" in answer, answer
    [view] = result["refunds"]
    assert view["paid_at"] == paid["executed_at"] and view["credit_transaction_id"] == paid["credit_transaction_id"]
    credit = store.refund_credit("c_ada", rf.id)
    assert credit is not None and credit.id == paid["credit_transaction_id"] and credit.created_at == paid["executed_at"]
    assert store.refund_credit("c_ada", "rf_5001") is None  # requested, not paid
    assert store.refund_credit("c_bob", rf.id) is None  # another customer's refund is not found
    undated = {"refunds": [{k: v for k, v in view.items() if k != "paid_at"}]}  # a view without the date: no "on ,"
    assert "credited to your account, so it is already" in _render_refund_status(undated, "when will it arrive?")
