"""`switchboard demo-bank`: the seeded demo records a newcomer types into the tour, with what a refund would meet."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from graph.app.cli import app
from graph.app.demo_bank import DEMO_TABLES, demo_bank


def test_the_listing_holds_the_tour_records_and_the_refund_outlooks():
    tables = demo_bank()
    assert [name for name, _ in DEMO_TABLES] == list(tables)
    assert {c["id"]: c["tenant"] for c in tables["customers"]} == {"c_ada": "t_demo", "c_bob": "t_demo"}
    assert {c["last4"] for c in tables["cards"]} == {"4242", "8899", "1881", "5555"}
    tx = {t["id"]: t for t in tables["transactions"]}
    assert tx["tx_1001"]["refund_request"].startswith("waits for 1 approver")
    assert tx["tx_2001"]["refund_request"].startswith("waits for 2 approvers")
    assert tx["tx_1007"]["refund_request"].startswith("paid at once")
    assert tx["tx_1008"]["note"] == "duplicate of tx_1007"
    assert tx["tx_1005"]["refund_request"] == "not refundable: tx_1005 already has refund rf_5001 (requested)"
    assert [r["id"] for r in tables["refunds"]] == ["rf_5001"]
    assert {t["id"] for t in tables["transfers"]} == {"tr_3001", "tr_3002", "tr_3101"}
    for name, columns in DEMO_TABLES:
        assert all(list(row) == list(columns) for row in tables[name]), name


def test_the_command_reads_nothing_of_the_home_and_prints_json(isolated_home):
    r = CliRunner().invoke(app, ["demo-bank", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["cards"][0]["last4"]
    assert not isolated_home.exists()  # no store, no folder: the listing comes from a scratch store
    text = CliRunner().invoke(app, ["demo-bank"])
    assert text.exit_code == 0 and "tx_1001" in text.output and "rf_5001" in text.output
