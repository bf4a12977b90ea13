"""Tests of nodes/store.py: seeding, reads, compare-and-swap writes, idempotent side effects,
concurrency (threads and processes on one file) and task ownership fencing."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from nodes.store import (
    BusinessRuleError,
    BusinessStore,
    NotFoundError,
    OwnershipError,
    StaleVersionError,
    default_store_path,
    iso,
    money,
    money_plain,
    open_store,
    parse_iso,
)

REF = datetime(2025, 3, 14, 12, 0, tzinfo=timezone.utc)


@pytest.fixture()
def store(tmp_path: Path) -> BusinessStore:
    s = BusinessStore(tmp_path / "business.db", now=lambda: REF)
    assert s.seed_demo() > 0
    return s


def _count(store: BusinessStore, sql: str, *params: object) -> int:
    conn = sqlite3.connect(store.path)
    try:
        return conn.execute(sql, params).fetchone()[0]
    finally:
        conn.close()


# -- money and time --------------------------------------------------------------------------------


def test_money_formats_minor_units() -> None:
    assert money(450, "GBP") == "£4.50"
    assert money(5, "EUR") == "€0.05"
    assert money(-1999, "USD") == "-$19.99"
    assert money(500, "CHF") == "5.00 CHF"
    assert money(1200, "JPY") == "1200 JPY"
    assert money_plain(450, "gbp") == "4.50 GBP"


def test_iso_round_trip_and_order() -> None:
    a, b = iso(REF), iso(REF + timedelta(minutes=1))
    assert a == "2025-03-14T12:00:00Z"
    assert parse_iso(a) == REF
    assert a < b


# -- schema and seed -------------------------------------------------------------------------------


def test_wal_mode_and_busy_timeout(store: BusinessStore) -> None:
    conn = sqlite3.connect(store.path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
    with store._read() as c:  # the store's own connections wait for locks
        assert c.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000


def test_seed_is_idempotent(store: BusinessStore) -> None:
    tables = ["customers", "cards", "transactions", "refunds", "transfers"]
    before = {t: _count(store, f"SELECT COUNT(*) FROM {t}") for t in tables}
    assert store.seed_demo() == 0
    assert store.seed_demo(REF + timedelta(days=30)) == 0
    after = {t: _count(store, f"SELECT COUNT(*) FROM {t}") for t in tables}
    assert before == after
    assert before["customers"] == 2
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
    # a later open never re-seeds: deleted demo rows stay deleted
    conn = sqlite3.connect(s.path)
    conn.execute("DELETE FROM transfers WHERE id='tr_3002'")
    conn.commit()
    conn.close()
    s2 = open_store()
    assert s2.get_transfer("c_ada", "tr_3002") is None
    assert open_store(tmp_path / "empty.db", seed=False).is_empty()


def test_memory_path_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        BusinessStore(":memory:")


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
    conn = sqlite3.connect(store.path)
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
    conn.executemany("INSERT INTO transactions VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
    conn.commit()
    conn.close()
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
    with pytest.raises(BusinessRuleError, match="already used"):
        store.request_refund("c_ada", "tx_1001", 2380, "GBP", "x", "k-1")


def test_request_refund_business_rules(store: BusinessStore) -> None:
    with pytest.raises(NotFoundError):
        store.request_refund("c_ada", "tx_2001", 620, "GBP", "not mine", "k-bob")
    with pytest.raises(BusinessRuleError, match="rf_5001"):
        store.request_refund("c_ada", "tx_1005", 5999, "GBP", "again", "k-5")
    with pytest.raises(BusinessRuleError, match="declined"):
        store.request_refund("c_ada", "tx_1010", 1999, "EUR", "declined", "k-10")
    with pytest.raises(BusinessRuleError, match="atm"):
        store.request_refund("c_ada", "tx_1002", 10000, "GBP", "atm", "k-2")
    with pytest.raises(BusinessRuleError, match="between"):
        store.request_refund("c_ada", "tx_1001", 2381, "GBP", "too much", "k-a")
    with pytest.raises(BusinessRuleError, match="GBP"):
        store.request_refund("c_ada", "tx_1001", 100, "EUR", "wrong currency", "k-c")
    assert _count(store, "SELECT COUNT(*) FROM refunds") == 1
    assert store.refund_eligibility("c_ada", "tx_1008") == (True, "eligible")
    assert store.refund_eligibility("c_ada", "tx_2001")[0] is False


def test_refund_window(tmp_path: Path) -> None:
    clock = {"now": REF}
    s = BusinessStore(tmp_path / "b.db", now=lambda: clock["now"])
    s.seed_demo()
    clock["now"] = REF + timedelta(days=200)
    eligible, reason = s.refund_eligibility("c_ada", "tx_1008")
    assert not eligible and "older than" in reason


def test_request_refund_race_same_key_creates_one(store: BusinessStore) -> None:
    barrier = threading.Barrier(8)
    results: list[object] = []

    def worker() -> None:
        barrier.wait()
        results.append(store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", "race-key"))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and len({r.id for r in results}) == 1  # type: ignore[attr-defined]
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


# -- refunds: execution exactly once ---------------------------------------------------------------


def test_execute_refund_exactly_once(store: BusinessStore) -> None:
    rf = store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", "req-1")
    first = store.execute_refund(rf.id, "exec-1")
    second = store.execute_refund(rf.id, "exec-1")
    assert first["replayed"] is False and second["replayed"] is True
    assert {k: v for k, v in first.items() if k != "replayed"} == \
        {k: v for k, v in second.items() if k != "replayed"}
    assert first["status"] == "executed" and first["amount_minor"] == 450
    assert store.get_refund("c_ada", rf.id).status == "executed"
    assert _count(store, "SELECT COUNT(*) FROM transactions WHERE reference=?", rf.id) == 1
    assert _count(store, "SELECT COUNT(*) FROM side_effects") == 1
    assert store.side_effect_result("exec-1")["refund_id"] == rf.id
    with pytest.raises(BusinessRuleError, match="already paid"):
        store.execute_refund(rf.id, "exec-other-key")


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


def test_execute_refund_two_threads_race_same_key(store: BusinessStore) -> None:
    rf = store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", "req-race")
    barrier = threading.Barrier(2)
    results: list[dict] = []
    errors: list[BaseException] = []

    def worker() -> None:
        barrier.wait()
        try:
            results.append(store.execute_refund(rf.id, "exec-race"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(r["replayed"] for r in results) == [False, True]
    assert _count(store, "SELECT COUNT(*) FROM transactions WHERE reference=?", rf.id) == 1


def _execute_in_process(path: str, refund_id: str, key: str, start: object, out: object) -> None:
    store = BusinessStore(path)
    start.wait()  # type: ignore[attr-defined]
    out.put(store.execute_refund(refund_id, key)["replayed"])  # type: ignore[attr-defined]


def test_execute_refund_two_processes_race_same_key(store: BusinessStore) -> None:
    rf = store.request_refund("c_ada", "tx_1008", 450, "GBP", "dup", "req-proc")
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_execute_in_process, args=(str(store.path), rf.id, "exec-proc", start, out))
             for _ in range(2)]
    for p in procs:
        p.start()
    start.set()
    replayed = sorted(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert replayed == [False, True]
    assert _count(store, "SELECT COUNT(*) FROM transactions WHERE reference=?", rf.id) == 1


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


def test_record_decision(store: BusinessStore) -> None:
    store.create_task("task-1", "thread-1", "refunds")
    d1 = store.record_decision("task-1", "alice", "approve", "looks right", decision_id="dc_1")
    d2 = store.record_decision("task-1", "alice", "approve", "looks right", decision_id="dc_1")
    assert d1 == d2 and d1.decided_at == iso(REF)
    store.record_decision("task-1", "bob", "reject")
    assert [d.decision for d in store.list_decisions("task-1")] == ["approve", "reject"]
    with pytest.raises(ValueError):
        store.record_decision("task-1", "alice", "maybe")
    with pytest.raises(NotFoundError):
        store.record_decision("nope", "alice", "approve")


def test_records_to_dict_json_safe(store: BusinessStore) -> None:
    import json

    for rec in [store.get_customer("c_ada"), store.list_cards("c_ada")[0],
                store.get_transaction("c_ada", "tx_1008"), store.get_refund("c_ada", "rf_5001"),
                store.list_transfers("c_ada")[0], store.create_task("t", "th", "billing")]:
        d = rec.to_dict()
        assert json.loads(json.dumps(d)) == d
    assert store.get_customer("c_ada").to_dict()["flags"]["plan"] == "standard"
