"""Tests of the business store's schema, migrations and infrastructure errors (checkpoints/business/schema.py,
migrate.py, engine.py): Alembic head, idempotent upgrade, adoption of a first-release SQLite file, refusal of
foreign or newer databases, StorageUnavailable for corrupt, read-only and unreachable databases, package data."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import tempfile
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from checkpoints.business import (
    SCHEMA_VERSION,
    BusinessStore,
    StorageUnavailable,
    current_revision,
    open_store,
    upgrade,
)
from checkpoints.business.migrate import MIGRATIONS, VERSION_TABLE, head_revision
from checkpoints.business.schema import TABLES_0001, metadata
from graph.contracts.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]

#: The schema the first release (nodes/store.py) created, copied verbatim: files made by it must be adopted.
OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS customers (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    name TEXT NOT NULL,
    email TEXT NOT NULL,
    flags TEXT NOT NULL DEFAULT '{}',
    version INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS cards (
    id TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers(id),
    last4 TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('active','blocked','frozen','expired')),
    kind TEXT NOT NULL CHECK (kind IN ('physical','virtual')),
    version INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS transactions (
    id TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers(id),
    card_id TEXT REFERENCES cards(id),
    merchant TEXT NOT NULL,
    amount_minor INTEGER NOT NULL CHECK (amount_minor >= 0),
    currency TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN
        ('card_payment','atm','transfer_out','transfer_in','top_up','fee')),
    status TEXT NOT NULL CHECK (status IN ('posted','pending','declined','reverted')),
    created_at TEXT NOT NULL,
    reference TEXT
);
CREATE INDEX IF NOT EXISTS transactions_by_customer ON transactions(customer_id, created_at);
CREATE TABLE IF NOT EXISTS refunds (
    id TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers(id),
    transaction_id TEXT NOT NULL REFERENCES transactions(id),
    amount_minor INTEGER NOT NULL CHECK (amount_minor > 0),
    currency TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN
        ('requested','approved','rejected','executed','cancelled')),
    reason TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    version INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS refunds_by_customer ON refunds(customer_id, created_at);
CREATE TABLE IF NOT EXISTS transfers (
    id TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers(id),
    beneficiary TEXT NOT NULL,
    amount_minor INTEGER NOT NULL CHECK (amount_minor >= 0),
    currency TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending','completed','failed','cancelled')),
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN
        ('open','awaiting_approval','completed','cancelled','needs_human')),
    current_owner TEXT NOT NULL,
    owner_version INTEGER NOT NULL DEFAULT 1,
    version INTEGER NOT NULL DEFAULT 1,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS side_effects (
    idempotency_key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    result_json TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS decisions (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    approver TEXT NOT NULL,
    decision TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT '',
    decided_at TEXT NOT NULL
);
"""


def _old_release_file(path: Path) -> None:
    """A business.db as the first release left it: WAL, user_version 1, a customer, a transaction, two refunds
    and two decisions with equal timestamps (their order was the rowid's), a recorded side effect."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript(OLD_SCHEMA)
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO customers(id, tenant_id, name, email, flags) VALUES "
                 "('c_ada','t_demo','Ada Lovelace','ada@example.com','{\"plan\": \"standard\"}')")
    conn.execute("INSERT INTO transactions VALUES ('tx_1','c_ada',NULL,'Tesco',2380,'GBP','card_payment','posted',"
                 "'2025-03-10T10:00:00Z',NULL)")
    conn.execute("INSERT INTO transactions VALUES ('tx_2','c_ada',NULL,'Amazon',999,'GBP','card_payment','posted',"
                 "'2025-03-10T10:00:00Z',NULL)")
    conn.execute("INSERT INTO refunds VALUES ('rf_z','c_ada','tx_1',2380,'GBP','requested','',"
                 "'2025-03-11T09:00:00Z','k-z',1)")
    conn.execute("INSERT INTO refunds VALUES ('rf_a','c_ada','tx_2',999,'GBP','cancelled','',"
                 "'2025-03-11T09:00:00Z','k-a',2)")
    conn.execute("INSERT INTO tasks VALUES ('task-1','thread-1','completed','refunds',1,3,'2025-03-11T09:00:00Z')")
    conn.execute("INSERT INTO decisions VALUES ('dc_z','task-1','alice','approve','','2025-03-11T09:00:00Z')")
    conn.execute("INSERT INTO decisions VALUES ('dc_a','task-1','bob','reject','','2025-03-11T09:00:00Z')")
    conn.execute("INSERT INTO side_effects VALUES ('exec-1','execute_refund','{\"refund_id\": \"rf_q\"}',"
                 "'2025-03-11T09:00:00Z')")
    conn.commit()
    conn.close()


# -- revisions -------------------------------------------------------------------------------------


def test_schema_version_is_the_scripts_head() -> None:
    assert head_revision() == SCHEMA_VERSION


def test_metadata_matches_a_migrated_database(business_url: str) -> None:
    """The Table objects the repository uses and the database the migrations build have the same tables,
    columns and indexes (so a change to one without the other fails here)."""
    store = BusinessStore(business_url)
    with store.engine.connect() as conn:
        insp = inspect(conn)
        assert set(insp.get_table_names()) == set(metadata.tables) | {VERSION_TABLE}
        for name, table in metadata.tables.items():
            assert [c["name"] for c in insp.get_columns(name)] == [c.name for c in table.columns], name
            assert {i["name"] for i in insp.get_indexes(name) if not i.get("duplicates_constraint")} == \
                {i.name for i in table.indexes}, name


def test_upgrade_is_idempotent(business_url: str) -> None:
    assert current_revision(business_url) is None  # nothing there yet
    assert upgrade(business_url) == SCHEMA_VERSION
    store = open_store(business_url)
    before = store.list_transactions("c_ada", limit=50)
    assert upgrade(business_url) == SCHEMA_VERSION
    assert upgrade(business_url) == SCHEMA_VERSION
    assert current_revision(business_url) == SCHEMA_VERSION
    assert store.list_transactions("c_ada", limit=50) == before
    with store.engine.connect() as conn:
        assert conn.execute(text(f"SELECT COUNT(*) FROM {VERSION_TABLE}")).scalar_one() == 1


def test_upgrade_step_by_step(business_url: str) -> None:
    assert upgrade(business_url, "0001") == "0001"
    store_tables = set(TABLES_0001)
    from sqlalchemy import create_engine  # not a store: opening one would upgrade

    from checkpoints.business.engine import resolve_url

    engine = create_engine(resolve_url(business_url))
    try:
        with engine.connect() as conn:
            assert store_tables <= set(inspect(conn).get_table_names())
            assert "seq" not in {c["name"] for c in inspect(conn).get_columns("refunds")}
    finally:
        engine.dispose()
    assert upgrade(business_url) == SCHEMA_VERSION
    assert open_store(business_url).get_customer("c_ada") is not None


def test_open_store_upgrades_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from checkpoints.business import migrate

    path = tmp_path / "business.db"
    open_store(path)
    calls: list[object] = []
    real_upgrade = migrate.upgrade
    monkeypatch.setattr(migrate, "upgrade", lambda url: calls.append(url) or real_upgrade(url))
    for _ in range(5):
        BusinessStore(path)  # at the head already and checked in this process: no upgrade
    assert calls == []
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    BusinessStore(path).close()  # a new file at the same path is migrated again
    assert len(calls) == 1 and current_revision(path) == SCHEMA_VERSION


# -- adoption of first-release files ---------------------------------------------------------------


def test_first_release_file_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "business.db"
    _old_release_file(path)
    assert current_revision(path) == "legacy"
    store = open_store(path, now=lambda: datetime(2025, 3, 14, tzinfo=UTC))  # adopts: stamp 0001, upgrade
    assert current_revision(path) == SCHEMA_VERSION
    assert store.get_customer("c_bob") is None  # a customer exists, so no demo seed
    assert store.get_customer("c_ada").flags == {"plan": "standard"}
    # the rows are kept, and the order that ties used to get from rowid is kept too
    assert [r.id for r in store.list_refunds("c_ada")] == ["rf_a", "rf_z"]  # newest first: rf_a came later
    assert [d.id for d in store.list_decisions("task-1")] == ["dc_z", "dc_a"]
    assert store.side_effect_result("exec-1") == {"refund_id": "rf_q"}
    assert store.execute_refund("rf_q", "exec-1")["replayed"] is True  # recorded effects still replay
    # and it works as a store of this release
    new = store.request_refund("c_ada", "tx_2", 999, "GBP", "again", "k-new")
    assert [r.id for r in store.list_refunds("c_ada")] == [new.id, "rf_a", "rf_z"]
    assert upgrade(path) == SCHEMA_VERSION


def test_foreign_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "business.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id TEXT PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(StorageUnavailable, match="not a switchboard database") as info:
        open_store(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall() == [("customers",)]
    conn.close()


def test_newer_revision_is_refused(business_url: str) -> None:
    store = open_store(business_url)
    with store.engine.begin() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))
    store.close()
    with pytest.raises(StorageUnavailable, match="revision 9999"):
        upgrade(business_url)


# -- infrastructure errors -------------------------------------------------------------------------


def test_corrupt_file_is_storage_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "business.db"
    path.write_bytes(os.urandom(4096))
    with pytest.raises(StorageUnavailable) as info:
        open_store(path)
    message = str(info.value)
    assert message.startswith(f"business database {path} is unavailable: ") and "\n" not in message
    assert "not a database" in message


def _open_as_unprivileged(path: Path) -> tuple[int, str]:
    """Open a store at ``path`` in a forked child that, when we are root, first drops to uid/gid 65534 (root
    ignores permission bits). Returns (exit code, the child's message)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: everything it needs is imported already
        os.close(read)
        code = 0
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            open_store(path)
            message = "opened"
        except StorageUnavailable as exc:
            message, code = str(exc), 3
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the test
            message, code = f"{type(exc).__name__}: {exc}", 4
        os.write(write, message.encode())
        os._exit(code)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        return os.waitstatus_to_exitcode(status), pipe.read()


@pytest.mark.subprocess
def test_read_only_directory_is_storage_unavailable() -> None:
    base = Path(tempfile.mkdtemp(prefix="sb-readonly-"))
    try:
        base.chmod(0o755)  # traversable by the unprivileged child
        fresh = base / "fresh"
        fresh.mkdir()
        made = base / "made"
        made.mkdir()
        open_store(made / "business.db").close()  # an existing database, then its directory becomes read-only
        for directory in (fresh, made):
            directory.chmod(0o555)
        (made / "business.db").chmod(0o444)
        for path in (fresh / "business.db", made / "business.db"):
            code, message = _open_as_unprivileged(path)
            assert code == 3, message
            assert message.startswith(f"business database {path} is unavailable: ") and "\n" not in message
            assert "unable to open" in message or "readonly" in message or "read-only" in message, message
    finally:
        for directory in (base / "fresh", base / "made"):
            if directory.exists():
                directory.chmod(0o755)
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_unreachable_postgres_is_storage_unavailable() -> None:
    # port 9 (discard) on loopback: nothing listens, the connection is refused at once
    with pytest.raises(StorageUnavailable) as info:
        open_store("postgresql://switchboard:secret@127.0.0.1:9/desk")
    message = str(info.value)
    assert message.startswith("business database postgresql://switchboard:***@127.0.0.1:9/desk is unavailable: ")
    assert "secret" not in message and "\n" not in message


def test_unsupported_url_is_config_error() -> None:
    with pytest.raises(ConfigError, match="unsupported business database"):
        open_store("mysql://root@localhost/desk")


# -- packaging and imports -------------------------------------------------------------------------


def test_migration_scripts_are_package_data() -> None:
    """A non-editable install must ship env.py, the template and every revision: each file under migrations/
    is matched by a package-data glob of checkpoints.business in pyproject.toml."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["checkpoints.business"]
    package = MIGRATIONS.parent
    files = [p for p in MIGRATIONS.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert {p.name for p in files} >= {"env.py", "script.py.mako", "0001_initial.py", "0002_insertion_order.py"}
    for p in files:
        assert any(p.relative_to(package).match(g) for g in globs), p


@pytest.mark.subprocess
def test_import_does_not_load_langgraph() -> None:
    code = ("import sys, checkpoints.business, checkpoints.business.migrate; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'langgraph', 'langchain_core', 'alembic'}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_upgrade_to_unknown_revision_is_value_error(tmp_path: Path) -> None:
    path = tmp_path / "business.db"
    upgrade(path)
    assert upgrade(path, "0001") == SCHEMA_VERSION  # an older revision is applied already: nothing happens
    with pytest.raises(ValueError, match="cannot upgrade"):
        upgrade(path, "nope")
    assert current_revision(path) == SCHEMA_VERSION


def _raw_engine(business_url: str):
    """An engine on the database itself (not a store: opening one would upgrade it)."""
    from sqlalchemy import create_engine

    from checkpoints.business.engine import resolve_url

    return create_engine(resolve_url(business_url))


def test_expired_refunds_get_their_own_status_and_old_rows_are_renamed(business_url: str) -> None:
    """Revision 0005: the CHECK of ``refunds.status`` accepts ``expired``; a refund of revision 0004 that an
    ``expire`` decision ended (stored as ``cancelled`` then) reads as ``expired``, one the customer cancelled stays
    ``cancelled``; the downgrade renames it back and refuses ``expired`` again."""
    from alembic import command

    from checkpoints.business.migrate import alembic_config

    assert upgrade(business_url, "0004") == "0004"
    rows = [
        ("rf_exp", "task_exp", "expire"), ("rf_can", "task_can", "cancel"), ("rf_rej", "task_rej", "reject"),
    ]
    engine = _raw_engine(business_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO customers (id, tenant_id, name, email) VALUES ('c_x', 't', 'X', 'x@x')"))
            conn.execute(text("INSERT INTO transactions (id, customer_id, merchant, amount_minor, currency, kind, "
                              "status, created_at) VALUES ('tx_x', 'c_x', 'M', 100, 'GBP', 'card_payment', 'posted', "
                              "'2026-01-01T00:00:00Z')"))
            for i, (rid, tid, decision) in enumerate(rows):
                status = "rejected" if decision == "reject" else "cancelled"
                conn.execute(text("INSERT INTO refunds (id, customer_id, transaction_id, amount_minor, currency, "
                                  "status, created_at, seq) VALUES (:id, 'c_x', 'tx_x', 100, 'GBP', :s, "
                                  "'2026-01-01T00:00:00Z', :seq)"), {"id": rid, "s": status, "seq": i + 1})
                conn.execute(text("INSERT INTO tasks (id, thread_id, status, current_owner, updated_at, refund_id) "
                                  "VALUES (:id, 'th', :s, 'refunds', '2026-01-02T00:00:00Z', :rid)"),
                             {"id": tid, "s": "completed" if decision == "reject" else "cancelled", "rid": rid})
                conn.execute(text("INSERT INTO decisions (id, task_id, approver, decision, decided_at, seq, final) "
                                  "VALUES (:id, :tid, 'operator:ann', :d, '2026-01-02T00:00:00Z', :seq, 1)"),
                             {"id": f"dc_{i}", "tid": tid, "d": decision, "seq": i + 1})
        with pytest.raises(Exception, match="(?i)check"), engine.begin() as conn:  # 0004 knows no expired refund
            conn.execute(text("UPDATE refunds SET status = 'expired' WHERE id = 'rf_can'"))

        def statuses() -> dict[str, str]:
            with engine.connect() as conn:
                return dict(conn.execute(text("SELECT id, status FROM refunds ORDER BY id")).all())

        engine.dispose()
        assert upgrade(business_url) == SCHEMA_VERSION
        assert statuses() == {"rf_can": "cancelled", "rf_exp": "expired", "rf_rej": "rejected"}
        store = BusinessStore(business_url)
        assert store.load_refund("rf_exp").status == "expired"  # old rows keep reading
        decision = store.refund_decision("rf_exp")
        assert decision is not None and decision.decision == "expire" and decision.decided_at == "2026-01-02T00:00:00Z"
        assert store.refund_decision("rf_nope") is None
        store.close()
        engine.dispose()
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0004")
        assert statuses() == {"rf_can": "cancelled", "rf_exp": "cancelled", "rf_rej": "rejected"}
        with pytest.raises(Exception, match="(?i)check"), engine.begin() as conn:
            conn.execute(text("UPDATE refunds SET status = 'expired' WHERE id = 'rf_can'"))
        engine.dispose()
        assert upgrade(business_url) == SCHEMA_VERSION and statuses()["rf_exp"] == "expired"
        inspector_engine = _raw_engine(business_url)
        with inspector_engine.connect() as conn:  # the rebuilt table keeps its indexes
            assert {i["name"] for i in inspect(conn).get_indexes("refunds")} >= {"refunds_by_customer",
                                                                                 "refunds_by_seq"}
        inspector_engine.dispose()
    finally:
        engine.dispose()


def test_tasks_get_their_approval_rule_and_old_tasks_count_as_one_approver(business_url: str) -> None:
    """Revision 0006: ``tasks.approvals_required`` and ``tasks.approval_deadline`` arrive empty on the tasks of
    revision 0005, which then pay on one human approver; the rule is limited to 0–2; the downgrade drops both."""
    from alembic import command

    from checkpoints.business.migrate import alembic_config

    assert upgrade(business_url, "0005") == "0005"
    engine = _raw_engine(business_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO tasks (id, thread_id, status, current_owner, updated_at, refund_id) "
                              "VALUES ('task_old', 'th', 'awaiting_approval', 'refunds', '2026-01-02T00:00:00Z', "
                              "'rf_5001')"))
        engine.dispose()
        assert upgrade(business_url) == SCHEMA_VERSION
        store = BusinessStore(business_url)
        old = store.get_task("task_old")
        assert (old.approvals_required, old.approval_deadline) == (None, None)
        with pytest.raises(Exception, match="(?i)check|constraint"), engine.begin() as conn:
            conn.execute(text("UPDATE tasks SET approvals_required = 3 WHERE id = 'task_old'"))
        engine.dispose()
        store.record_approval_rule("task_old", 1, "2026-01-03T00:00:00Z")
        store.close()
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0005")
        engine.dispose()
        with engine.connect() as conn:
            assert "approvals_required" not in {c["name"] for c in inspect(conn).get_columns("tasks")}
            assert conn.execute(text("SELECT status FROM tasks WHERE id = 'task_old'")).scalar() == "awaiting_approval"
    finally:
        engine.dispose()
