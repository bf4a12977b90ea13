"""``switchboard whatif``: recorded threads replayed through a changed policy set, checked against a direct re-run of the
same scripted conversations on a graph built with that policy set; exit codes; no write to the business store; the
change file's format; the policy set the live graph uses."""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from checkpoints import open_checkpointer
from checkpoints.business import open_store
from checkpoints.event_log import open_event_log
from checkpoints.threads import thread_values
from graph.app.whatif_change import apply_change, load_change
from graph.builder import build_desk, make_deps
from graph.contracts.context import RunContext
from graph.contracts.errors import InputError
from graph.contracts.settings import DEFAULT_MAX_HOPS, Settings
from graph.contracts.state_values import path_of
from graph.conversation import Conversation
from nodes.testing import scripted as sm
from nodes.testing.state import packet as state_packet
from policies.handoff import DEFAULT_FACT_REQUIREMENTS, FactRequirement, check_guards
from policies.policy_set import DEFAULT_POLICY_SET, PolicySet, with_edges
from policies.risk import DEFAULT_RISK_RULES, RiskInput, assess_refund
from tests.conftest import invoke_cli

THREADS = 50
#: Refund amounts (minor units) the threads cycle through: around today's 20.00 limit and the 10.00 of the change.
AMOUNTS = (450, 999, 1000, 1001, 1500, 1999, 2000, 2001, 2500, 9000)
#: The change every comparison uses: one edge and one risk limit tightened.
CHANGE = "remove_edges: [[billing, refunds]]\nrisk:\n  auto_approve_limit: 10.00\n"


def _scenario(i: int) -> tuple[str, str, int]:
    """``(customer, message, amount)`` of thread ``i``: five kinds of conversation, each customer with one payment."""
    customer, tx, amount = f"c_w{i:02d}", f"tx_w{i:02d}", AMOUNTS[(i // 5) % len(AMOUNTS)]
    text = [f"The charge {tx} is wrong, I want a refund", f"Please refund {tx}", "My card does not work abroad",
            "Where is my transfer to Mary?", "What is this charge on my statement?"][i % 5]
    return customer, text, amount


def _model() -> sm.ScriptedChatModel:
    """Triage routes by keyword; billing hands a refund to refunds (with the transaction), else answers; refunds
    requests the refund once, then answers; an agent whose handoff was refused answers."""

    def policy(agent, user, names, i, msgs):
        tx = next((w for w in user.replace(",", " ").split() if w.startswith("tx_")), None)
        refused = any(isinstance(m, ToolMessage) and str(m.content).startswith("Refused") for m in msgs)
        if agent == "triage":
            target = ("billing" if "charge" in user else "refunds" if "refund" in user else
                      "cards" if "card" in user else "transfers")
            return AIMessage(content="", tool_calls=[sm.tool_call(f"transfer_to_{target}", reason="route",
                                                                 **({"facts": {"transaction_id": tx}} if tx else {}))])
        if agent == "billing" and "refund" in user and not refused:
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_refunds", reason="wants the money back",
                                                                 facts={"transaction_id": tx})])
        if agent == "refunds" and not any(isinstance(m, ToolMessage) and m.name == "request_refund" for m in msgs):
            return AIMessage(content="", tool_calls=[sm.tool_call("request_refund", transaction_id=tx,
                                                                 reason="not recognised")])
        return AIMessage(content=f"{agent} answers")

    return sm.ScriptedChatModel(policy=policy)


def _seed(store) -> None:
    """One customer per thread (so no thread's refund counts in another's risk check), each with one card payment."""
    now = datetime.now(UTC)
    customers, txs = [], []
    for i in range(THREADS):
        customer, _, amount = _scenario(i)
        customers.append({"id": customer, "tenant_id": "t_demo", "name": f"Customer {i}", "email": f"w{i}@example.com",
                          "flags": json.dumps({"identity_verified": True})})
        txs.append({"id": f"tx_w{i:02d}", "customer_id": customer, "card_id": None, "merchant": f"Shop {i}",
                    "amount_minor": amount, "currency": "GBP", "kind": "card_payment", "status": "posted",
                    "created_at": (now - timedelta(days=3)).isoformat(), "reference": None})
    store.insert_rows({"customers": customers, "transactions": txs})


def _record(home: Path, policy: PolicySet | None = None, threads: int = THREADS) -> None:
    """The 50 scripted conversations on a new home (its SQLite checkpoints, events and business store), on a graph
    built with ``policy`` (None: today's rules)."""
    home.mkdir(parents=True, exist_ok=True)
    settings = Settings(db=str(home / "switchboard.db"), business_db=str(home / "business.db"))
    store = open_store(settings.business_db)
    _seed(store)
    router = sm.KeywordRouter()
    deps = make_deps(_model(), settings, store, router, policy=policy)
    desk = build_desk(checkpointer=open_checkpointer(settings.db), deps=deps)
    for i in range(threads):
        customer, text, _ = _scenario(i)
        Conversation(f"w{i:02d}", graph=desk.graph, store=store, context=RunContext(user_id=customer)).send(text)


def _path(home: Path, thread: str) -> list[dict]:
    """The thread's handoff path, its records as JSON (the state holds ``HandoffRecord`` models)."""
    values = thread_values(open_checkpointer(str(home / "switchboard.db")), thread)
    return [r.model_dump(mode="json") for r in path_of(values)]


def _first_difference(recorded: list[dict], rerun: list[dict], refused: set[tuple]) -> tuple | None:
    """``(turn, hop, kind)`` of the first step where the re-run's path leaves the recorded one, named from the re-run's
    facts: a handoff the re-run refused, or a risk step that went to another node."""
    for a, b in zip(recorded, rerun + [None] * len(recorded)):
        key = lambda r: (r["from_agent"], r["to_agent"], r["kind"])  # noqa: E731
        if b is not None and key(a) == key(b):
            continue
        if a["kind"] == "handoff" and (a["turn"], a["from_agent"], a["to_agent"]) in refused:
            return a["turn"], a["hop"], "handoff_refused"
        if a["from_agent"] == "risk" and b is not None and b["from_agent"] == "risk":
            kinds = {("refund_execute", "human_approval"): "approval_required",
                     ("human_approval", "refund_execute"): "auto_approved"}
            return a["turn"], a["hop"], kinds.get((a["to_agent"], b["to_agent"]), "other")
        return a["turn"], a["hop"], "unexplained"
    return None


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A home holding the 50 recorded threads and an operator ``ida`` who may read them."""
    home = tmp_path_factory.mktemp("whatif") / "home"
    _record(home)
    open_store(home / "business.db").add_operator("ida", "t_demo", ["agent"])
    return home


@pytest.fixture
def at(recorded, monkeypatch) -> Path:
    monkeypatch.setenv("SWITCHBOARD_HOME", str(recorded))
    monkeypatch.setenv("COLUMNS", "250")
    return recorded


def _whatif(home: Path, change: str, *args: str, name: str = "change.yaml"):
    path = home.parent / name
    path.write_text(change)
    return invoke_cli("whatif", str(path), "--as", "ida", *args)


def _store_dump(path: Path) -> list[str]:
    """The business store's schema and rows, table by table (read-only)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return list(conn.iterdump())


def test_reported_changes_match_a_direct_rerun_with_the_changed_policy(at, tmp_path, monkeypatch):
    """Tighten billing -> refunds and the auto-approval limit: every change whatif reports is where a re-run of the
    same scripted conversations on a graph built with the changed policy set leaves the recorded path. The replay
    never opens the business store (opening it fails the test) and its rows are the same afterwards."""
    import checkpoints.business as business

    def refuse_store(*args, **kwargs):
        raise AssertionError("whatif opened the business store")

    before = _store_dump(at / "business.db")
    monkeypatch.setattr(business, "open_store", refuse_store)
    result = _whatif(at, CHANGE, "--json")
    monkeypatch.undo()
    assert result.exit_code == 1, result.output
    assert _store_dump(at / "business.db") == before
    report = json.loads(result.output)
    assert report["change"] == ["- edge billing -> refunds", "risk.auto_approve_limit_minor: 2000 -> 1000"]
    assert report["totals"]["threads"] == THREADS and report["totals"]["not_replayable"] == 0
    reported = {(c["thread_id"], c["turn"], c["hop"], c["kind"]) for c in report["changes"]}

    changed = with_edges(replace(PolicySet(), risk=replace(DEFAULT_RISK_RULES, auto_approve_limit_minor=1000)),
                         remove=frozenset({("billing", "refunds")}))
    assert changed == apply_change(PolicySet(), load_change(at.parent / "change.yaml"))
    rerun = tmp_path / "rerun"
    _record(rerun, changed)
    log = open_event_log(str(rerun / "switchboard.db"))
    expected = set()
    for i in range(THREADS):
        tid = f"w{i:02d}"
        refused = {(e.turn, e.from_agent, e.to_agent) for e in log.events(tid, kinds=["handoff_refused"])}
        diff = _first_difference(_path(at, tid), _path(rerun, tid), refused)
        if diff is not None:
            expected.add((tid, *diff))
    assert reported == expected
    kinds = [k for *_, k in expected]
    # every conversation through billing to refunds (10), and the direct refunds above 10.00 up to 20.00 (4)
    assert kinds.count("handoff_refused") == 10 and kinds.count("approval_required") == 4, sorted(expected)
    assert report["totals"]["by_kind"] == {"approval_required": 4, "handoff_refused": 10}


def test_no_change_exits_0_with_an_empty_report(at):
    result = _whatif(at, "max_hops: 7\n", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["change"] == [] and report["changes"] == [] and report["not_replayable"] == []
    assert report["totals"]["threads"] == THREADS and report["totals"]["decisions"] > THREADS


def test_text_report_lists_thread_turn_hop_and_before_after(at):
    result = _whatif(at, "remove_edges: [[triage, transfers]]\n", "--thread", "w03", "--thread", "w08")
    assert result.exit_code == 1, result.output
    assert "accepted handoff to transfers → refused handoff to transfers" in result.output
    assert "2 decisions change (handoff_refused 2) in 2 threads" in result.output


def test_hop_budget_and_module_override(at):
    """max_hops 1 ends billing's second handoff in fallback; a Python module can give the policy set instead."""
    result = _whatif(at, "max_hops: 1\n", "--json", "--thread", "w00")
    assert result.exit_code == 1, result.output
    [change] = json.loads(result.output)["changes"]
    assert (change["kind"], change["before"], change["after"]) == ("fallback", "accepted handoff to refunds",
                                                                  "fallback (hop_budget)")
    module = at.parent / "tight.py"
    module.write_text("from dataclasses import replace\n\ndef whatif(policy):\n    return replace(policy, max_hops=1)\n")
    from_module = invoke_cli("whatif", "--module", str(module), "--as", "ida", "--json", "--thread", "w00")
    assert from_module.exit_code == 1 and json.loads(from_module.output)["changes"] == [change]


@pytest.mark.parametrize("content,name,message", [
    ("remove_edges: [[billing, account]]\n", "c.yaml", "billing -> account is not an edge of the table"),
    ("remove_edges: [[billing, nobody]]\n", "c.yaml", "unknown agent 'nobody'"),
    ("risk: {auto_approve_limit: 10.001}\n", "c.yaml", "at most two decimals"),
    ("risk: {auto_approve_limit: -1}\n", "c.yaml", "non-negative amount"),
    ("max_hops: 0\n", "c.yaml", "max_hops must be a whole number from 1 to 100"),
    ("hops: 2\n", "c.yaml", "unknown key 'hops'"),
    ("remove_edges: [[billing, refunds]\n", "c.yaml", "is not valid YAML"),
    ('{"max_hops": }', "c.json", "is not valid JSON"),
    ("max_hops = 2\n", "c.ini", "use .yaml, .yml, .json or .toml"),
    ("[guards]\ndrop = [{target = 'cards', fact = 'card_id'}]\n", "c.toml", "no guard cards needs card_id today"),
])
def test_a_bad_change_file_is_refused_naming_the_key(tmp_path, content, name, message):
    with pytest.raises(InputError, match=re.escape(message)):
        apply_change(PolicySet(), load_change(_write(tmp_path / name, content)))


def _write(path: Path, content: str) -> Path:
    path.write_text(content)
    return path


@pytest.mark.subprocess
def test_cli_exit_codes_and_one_line_errors(at):
    """Through the installed entry point: 2 and one ``error:`` line for a bad file, a missing file, an unknown thread."""
    import os
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "SWITCHBOARD_HOME": str(at), "COLUMNS": "250"}
        return subprocess.run([sys.executable, "-m", "graph.app.cli", "whatif", *args, "--as", "ida"], capture_output=True,
                              text=True, env=env, cwd=Path(__file__).resolve().parents[2], timeout=300)

    bad = _write(at.parent / "bad.yaml", "risk: {auto_approve_limit: ten}\n")
    for args, line in (((str(bad),), f"error: {bad}: risk.auto_approve_limit: expected an amount such as 10.00 (got 'ten')"),
                       (("nope.yaml",), "error: change file nope.yaml not found"),
                       ((str(_write(at.parent / "ok.yaml", "max_hops: 3\n")), "--thread", "zz"),
                        "error: thread zz is not a recorded thread of tenant t_demo")):
        r = run(*args)
        assert (r.returncode, r.stderr.strip(), r.stdout) == (2, line, ""), r
    assert run(str(at.parent / "ok.yaml")).returncode == 0


def test_formats_give_the_same_policy_set(tmp_path):
    yaml_doc = "remove_edges: [[billing, refunds]]\nmax_hops: 3\nrisk: {auto_approve_limit: 10}\n" \
               "guards: {require: [{target: cards, fact: card_id}]}\n"
    json_doc = json.dumps({"remove_edges": [["billing", "refunds"]], "max_hops": 3, "risk": {"auto_approve_limit": "10.00"},
                           "guards": {"require": [{"target": "cards", "fact": "card_id"}]}})
    toml_doc = "remove_edges = [['billing', 'refunds']]\nmax_hops = 3\n[risk]\nauto_approve_limit = 10.0\n" \
               "[guards]\nrequire = [{target = 'cards', fact = 'card_id'}]\n"
    sets = [apply_change(PolicySet(), load_change(_write(tmp_path / f"c.{ext}", doc)))
            for ext, doc in (("yaml", yaml_doc), ("json", json_doc), ("toml", toml_doc))]
    assert sets[0] == sets[1] == sets[2]
    assert sets[0].differences(PolicySet()) == ["+ edge billing -> refunds", "- guard cards needs card_id",
                                                "risk.auto_approve_limit_minor: 1000 -> 2000", "max_hops: 3 -> 7"]


def test_the_live_graph_uses_todays_rules_by_default_and_a_given_policy_set():
    settings = Settings(db="memory", business_db="memory")
    deps = make_deps(sm.answer_only({}), settings, store=object(), router=sm.KeywordRouter())
    assert deps.policy_set == DEFAULT_POLICY_SET and DEFAULT_POLICY_SET.max_hops == DEFAULT_MAX_HOPS
    assert make_deps(sm.answer_only({}), settings.replace(max_hops=3), store=object(),
                     router=sm.KeywordRouter()).policy_set.max_hops == 3
    tight = PolicySet(max_hops=2)
    given = make_deps(sm.answer_only({}), settings, store=object(), router=sm.KeywordRouter(), policy=tight)
    assert given.policy_set is tight and given.settings.max_hops == 2 and given.table is tight.edges


def test_guards_and_risk_rules_as_data():
    packet = state_packet(open_questions=("Which transaction should be refunded?",))
    assert check_guards("billing", "refunds", packet, None).ok  # today's: an open question asking for it will do
    strict = (FactRequirement("refunds", "transaction_id"), *DEFAULT_FACT_REQUIREMENTS[1:])
    assert check_guards("billing", "refunds", packet, None, strict).missing == ("transaction_id",)
    r = RiskInput(1500, "GBP", 0, {})
    assert assess_refund(r).outcome == "auto_approve"
    assert assess_refund(r, replace(DEFAULT_RISK_RULES, auto_approve_limit_minor=1000)).outcome == "human_approval"


def test_a_recording_the_rules_do_not_reproduce_is_not_replayable(tmp_path, monkeypatch):
    """A thread recorded under a hop budget of 1 (billing's handoff ended in fallback): replayed against today's
    budget of 7 the recorded decision is not reproduced, so the thread stops as not replayable, and that is no change."""
    from graph.app.whatif_cli import run_whatif

    home = tmp_path / "old"
    _record(home, PolicySet(max_hops=1), threads=1)
    assert [r["kind"] for r in _path(home, "w00")][-1] == "fallback"
    settings = Settings(db=str(home / "switchboard.db"), business_db=str(home / "business.db"))
    report = run_whatif(settings, "t_demo", _write(tmp_path / "c.yaml", "max_hops: 1\n"), None, [], None)
    assert report.changes == [] and report.totals()["not_replayable"] == 1
    [stop] = [t.stop for t in report.threads]
    assert (stop.turn, stop.hop, stop.replayable) == (1, 3, False)
    assert "the recording shows fallback (hop_budget)" in stop.reason and "accepted handoff to refunds" in stop.reason


def test_a_change_in_a_later_turn_is_found_after_replaying_the_earlier_ones(tmp_path):
    """Two turns on one thread: the first answered by billing, the second handed from billing to refunds; removing
    that edge changes the second turn at the hop its record has."""
    from graph.app.whatif_cli import run_whatif

    home = tmp_path / "two"
    home.mkdir()
    settings = Settings(db=str(home / "switchboard.db"), business_db=str(home / "business.db"))
    store = open_store(settings.business_db)
    _seed(store)
    desk = build_desk(checkpointer=open_checkpointer(settings.db),
                      deps=make_deps(_model(), settings, store, sm.KeywordRouter()))
    conv = Conversation("two", graph=desk.graph, store=store, context=RunContext(user_id="c_w00"))
    conv.send("What is this charge on my statement?")
    conv.send("The charge tx_w00 is wrong, I want a refund")
    [handoff] = [r for r in _path(home, "two") if r["turn"] == 2 and r["from_agent"] == "billing"
                 and r["kind"] == "handoff"]
    assert handoff["to_agent"] == "refunds"
    report = run_whatif(settings, "t_demo", _write(tmp_path / "c.yaml", "remove_edges: [[billing, refunds]]\n"), None,
                        [], None)
    [change] = report.changes
    assert (change.turn, change.hop, change.agent, change.kind) == (2, handoff["hop"], "billing", "handoff_refused")
    assert report.threads[0].turns == 2 and report.threads[0].decisions >= 2
    # a thread checkpointed by an earlier version holds its path and packets as plain dicts: the same replay
    from graph.app.whatif import replay_thread

    values = thread_values(open_checkpointer(settings.db), "two")
    old = {**values, "handoff_path": _path(home, "two"), "handoff": None}
    assert all(isinstance(r, dict) for r in old["handoff_path"])
    changed = with_edges(DEFAULT_POLICY_SET, remove=frozenset({("billing", "refunds")}))
    for given in (values, old):
        replay = replay_thread("two", given, {}, DEFAULT_POLICY_SET, changed)
        assert [(c.turn, c.hop, c.kind) for c in replay.changes] == [(2, handoff["hop"], "handoff_refused")]


def test_since_selects_threads_by_their_last_runs(at):
    recent = json.loads(_whatif(at, CHANGE, "--json", "--since", "1h").output)
    assert recent["totals"]["threads"] == THREADS
    later = _whatif(at, CHANGE, "--json", "--since", (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%d"))
    assert later.exit_code == 0 and json.loads(later.output)["totals"]["threads"] == 0


def _recorded_on(db: str, home: Path, threads: int) -> list[tuple]:
    """The changes :data:`CHANGE` makes to ``threads`` conversations recorded with checkpoints and events at ``db``."""
    from graph.app.whatif_cli import run_whatif

    home.mkdir(parents=True, exist_ok=True)
    settings = Settings(db=db, business_db=db if db.startswith("postgresql") else str(home / "business.db"))
    store = open_store(settings.business_db)
    _seed(store)
    desk = build_desk(checkpointer=open_checkpointer(settings.db),
                      deps=make_deps(_model(), settings, store, sm.KeywordRouter()))
    for i in range(threads):
        customer, text, _ = _scenario(i)
        Conversation(f"w{i:02d}", graph=desk.graph, store=store, context=RunContext(user_id=customer)).send(text)
    report = run_whatif(settings, "t_demo", _write(home / "c.yaml", CHANGE), None, [], None)
    assert report.totals()["threads"] == threads
    return sorted((c.thread_id, c.turn, c.hop, c.kind) for c in report.changes)


@pytest.mark.postgres
def test_postgresql_threads_give_the_report_sqlite_threads_give(tmp_path):
    from tests.conftest import postgres_database

    sqlite = _recorded_on(str(tmp_path / "a" / "switchboard.db"), tmp_path / "a", 30)
    with postgres_database() as url:
        assert _recorded_on(url, tmp_path / "b", 30) == sqlite
    assert {k for *_, k in sqlite} == {"handoff_refused", "approval_required"}


def _rows(home: Path) -> dict[str, list[str]]:
    """Every database of ``home`` (checkpoints and events, business store) as its schema and rows (read-only)."""
    return {p.name: _store_dump(p) for p in sorted(home.glob("*.db"))}


def _main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``switchboard ARGS…`` through the script's entry point (its one-line errors): ``(exit code, stdout, stderr)``."""
    import sys

    from graph.app.cli import main

    monkeypatch.setattr(sys, "argv", ["switchboard", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_whatif_writes_no_checkpoint_no_event_and_no_business_row(at):
    before = _rows(at)
    assert {"switchboard.db", "business.db"} <= set(before)
    r = _whatif(at, CHANGE, "--json")
    assert r.exit_code == 1, r.output
    _whatif(at, "max_hops: 1\n", "--thread", "w00")
    assert _rows(at) == before


def test_an_operator_of_another_tenant_sees_no_thread_of_this_one(at, monkeypatch, capsys):
    store = open_store(at / "business.db")
    if store.get_operator("zed") is None:
        store.add_operator("zed", "t_other", ["admin"])
    path = _write(at.parent / "zed.yaml", CHANGE)
    code, out, _ = _main(monkeypatch, capsys, "whatif", str(path), "--as", "zed", "--json")
    assert code == 0 and json.loads(out)["totals"]["threads"] == 0, out
    for args, says in ((("--thread", "w00"), "is not a recorded thread of tenant t_other"),
                       (("--tenant", "t_demo"), "reads the threads of tenant t_other only")):
        code, out, err = _main(monkeypatch, capsys, "whatif", str(path), "--as", "zed", *args)
        assert code == 2 and says in err and "w01" not in out + err, (out, err)


@pytest.mark.parametrize("name, content, says", [
    ("bin.yaml", b"\xff\xfe\x00max_hops: 2", "is not UTF-8 text (undecodable byte at position 0)"),
    ("exits.py", b"import sys\nsys.exit(0)\n", "called sys.exit(0) instead of giving a PolicySet"),
    ("neg.py", b"import dataclasses\ndef whatif(p):\n    return dataclasses.replace(p, max_hops=-5)\n",
     "max_hops must be a whole number from 1 to 100 (got -5)"),
    ("negrisk.py", b"import dataclasses\ndef whatif(p):\n    return dataclasses.replace(p, risk=dataclasses.replace("
     b"p.risk, reject_above_minor=-1))\n", "risk.reject_above_minor must be a non-negative whole number"),
    ("raises.py", b"raise RuntimeError('boom')\n", "RuntimeError: boom"),
    ("bomb.yaml", b"remove_edges:\n  - &a [billing, refunds]\n  - &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
     b"  - &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n  - &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n  - &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n",
     "is not a [source, target] pair"),
    ("obj.yaml", b"!!python/object/apply:os.system ['echo pwned']\n", "is not valid YAML"),
])
def test_a_hostile_change_file_or_module_is_one_error_line_and_exit_2(at, monkeypatch, capsys, name, content, says):
    path = at.parent / name
    path.write_bytes(content)
    args = ("whatif", str(path)) if name.endswith((".yaml", ".json")) else \
        ("whatif", str(_write(at.parent / "none.yaml", "")), "--module", str(path))
    code, out, err = _main(monkeypatch, capsys, *args, "--as", "ida")
    lines = [x for x in err.splitlines() if x.strip()]
    assert (code, out) == (2, ""), (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], err
