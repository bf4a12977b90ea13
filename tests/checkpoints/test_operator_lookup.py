"""The read commands check the acting operator with ``sqlite3`` alone when the business store is a SQLite file at the
current schema (checkpoints.business.operator_lookup, for start-up time): the same record as the store's, the same
verdict (policies.authz.authorize_operator), no SQLAlchemy import; refusals still go through the store and are
recorded."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from checkpoints.business import open_store
from checkpoints.business.operator_lookup import LookupUnavailable, read_operator
from graph.app.operator_cli import READ_ROLES, acting_operator
from graph.contracts.errors import AccessDenied
from graph.contracts.settings import Settings
from tests.conftest import REPO


def test_the_light_read_gives_the_stores_record(isolated_home):
    store = open_store(isolated_home / "business.db")
    store.add_operator("ann", "t_demo", ["approver", "agent"], customer_id="c_bob")
    store.add_operator("off", "t_demo", ["agent"])
    store.set_operator_enabled("off", False)
    db = isolated_home / "business.db"
    for name in ("ann", "off", "nobody"):
        assert read_operator(db, name) == store.get_operator(name)
        assert read_operator(f"sqlite:///{db}", name) == store.get_operator(name)
    assert read_operator(db, "off").enabled is False and read_operator(db, "ann").roles == ("agent", "approver")


def test_it_steps_aside_for_what_it_cannot_read(isolated_home, tmp_path):
    with pytest.raises(LookupUnavailable):
        read_operator("postgresql://u@h/db", "ann")
    with pytest.raises(LookupUnavailable):
        read_operator(tmp_path / "missing.db", "ann")
    old = tmp_path / "old.db"
    open_store(old).add_operator("ann", "t_demo", ["agent"])
    with sqlite3.connect(old) as conn:  # a schema this code would migrate: the store's own path decides
        conn.execute("UPDATE alembic_version_business SET version_num = '0003'")
    with pytest.raises(LookupUnavailable):
        read_operator(old, "ann")


def test_acting_operator_allows_without_sqlalchemy_and_refusals_are_still_recorded(isolated_home):
    store = open_store(isolated_home / "business.db")
    store.add_operator("ann", "t_demo", ["agent"])
    code = ("import sys; from graph.app.operator_cli import acting_operator, READ_ROLES; "
            "a = acting_operator('ann', READ_ROLES, 'threads'); print(a.name, a.tenant_id, sorted(a.roles)); "
            "print('sqlalchemy' in sys.modules)")
    env = {**os.environ, "SWITCHBOARD_HOME": str(isolated_home)}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["ann t_demo ['agent']", "False"]
    settings = Settings.from_env()
    acting = acting_operator("ann", READ_ROLES, "threads", settings=settings)
    assert acting.store.get_operator("ann") == store.get_operator("ann")  # the store opens on first use
    with pytest.raises(AccessDenied, match="lacks the role approver"):
        acting_operator("ann", frozenset({"approver"}), "resume", settings=settings)
    with pytest.raises(AccessDenied, match="unknown operator 'zed'"):
        acting_operator("zed", READ_ROLES, "threads", settings=settings)
    denied = {(e.actor, e.action) for e in store.audit_entries() if e.outcome == "denied"}
    assert denied == {("operator:ann", "resume"), ("operator:zed", "threads")}
