"""``switchboard eval``: the suite format and its one-line refusals, the scoring of a turn (right, wrong, forbidden
effects), the JSON report, the OpenAI-compatible path over HTTP (the project's stub), and the shipped suite's shape
and fixed split. The whole shipped suite is a command (``make eval``), not a test: a sample of it runs here."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from graph.app.effects import Records, effect_changes, effect_matches
from graph.app.eval_run import run_suite
from graph.app.eval_suite import Suite, load_suite, stratified_split
from graph.contracts.errors import InputError
from tests.conftest import invoke_cli

TINY = """
name: tiny
categories: [cards, money]
conversations:
  - id: coffee
    category: money
    turns:
      - {say: "I was charged twice for my coffee", agent: billing, mention: [tx_1008]}
      - {say: "yes please refund it", agent: refunds, effects: [refund_paid:tx_1008]}
      - {say: "what's my balance?", agent: cards, note: "a wrong expectation: this turn must fail"}
  - id: freeze
    category: cards
    forbid: [card_frozen:4242]
    turns:
      - {say: "please freeze my card ending 4242", agent: cards}
      - {say: "thanks", agent: any, mention: [no such fact]}
"""


def _write(tmp_path: Path, text: str, name: str = "suite.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------- the format


BAD = [
    ("conversations:\n  - id: a\n    category: c\n    turns: [{say: hi, agent: any}]\n", "name: Field required", ""),
    ("name: x\nconversations:\n  - id: a1\n    category: c\n    turns: [{say: hi, agent: billin}]\n",
     "conversation 'a1' turns[0].agent", "'billin' is not an agent"),
    ("name: x\nconversations:\n  - id: a2\n    category: c\n    turns: [{say: hi, agent: any, effects: [refund_done]}]\n",
     "conversation 'a2' turns[0].effects", "'refund_done' is not an effect"),
    ("name: x\nconversations:\n  - id: a3\n    category: c\n    turns: [{agent: any}]\n",
     "conversation 'a3' turns[0]", "either 'say'"),
    ("name: x\nconversations:\n  - id: a4\n    category: c\n    turns: [{say: hi}]\n",
     "conversation 'a4' turns[0]", "needs 'agent'"),
    ("name: x\nconversations:\n  - id: a5\n    category: c\n    turns: [{say: hi, agent: any, colour: red}]\n",
     "conversation 'a5' turns[0].colour", "Extra inputs"),
    ("name: x\nconversations:\n  - id: a6\n    category: c\n    split: test\n    turns: [{say: hi, agent: any}]\n",
     "conversation 'a6' split", "'dev' or 'held'"),
    ("name: x\ncategories: [c]\nconversations:\n  - id: a7\n    category: d\n    turns: [{say: hi, agent: any}]\n",
     "conversation 'a7' category", "not one of the suite's categories"),
    ("name: x\nconversations:\n  - {id: a8, category: c, turns: [{say: hi, agent: any}]}\n"
     "  - {id: a8, category: c, turns: [{say: ho, agent: any}]}\n", "conversation 'a8' id", "used twice"),
    ("name: x\nconversations:\n  - id: a9\n    category: c\n    turns: [{say: hi, agent: any, regex: '('}]\n",
     "conversation 'a9' turns[0].regex", "not a regular expression"),
    ("name: [unclosed\n", "not valid YAML", ""),
]


@pytest.mark.parametrize(("text", "where", "what"), BAD, ids=[w for _, w, _ in BAD])
def test_a_bad_suite_is_refused_with_one_line_naming_file_conversation_and_field(tmp_path, text, where, what):
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_suite(path)
    line = str(info.value)
    assert "\n" not in line and line.startswith(f"{path}: ") and where in line and what in line, line


def test_a_bad_suite_exits_2_on_the_command_line_with_one_error_line(tmp_path, monkeypatch, capsys):
    from graph.app.cli import main

    path = _write(tmp_path, BAD[1][0])
    monkeypatch.setattr(sys, "argv", ["switchboard", "eval", str(path)])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "conversation 'a1' turns[0].agent" in err, err
    monkeypatch.setattr(sys, "argv", ["switchboard", "eval", "no-such-suite"])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2 and "no shipped suite of that name (shipped: desk)" in capsys.readouterr().err


def test_a_json_suite_is_read_like_yaml_and_an_unknown_customer_is_refused_before_any_run(tmp_path):
    doc = {"name": "j", "conversations": [{"id": "c1", "category": "x", "customer": "c_zed",
                                           "turns": [{"say": "hi", "agent": ["triage", "clarify"]}]}]}
    path = _write(tmp_path, json.dumps(doc), "suite.json")
    suite, _ = load_suite(path)
    assert suite.conversations[0].turns[0].agent == ("triage", "clarify")
    with pytest.raises(InputError) as info:
        run_suite(suite, suite.select(), path=str(path))
    assert "conversation 'c1' customer: 'c_zed' is not a customer" in str(info.value)


def test_effects_are_named_by_what_changed():
    before = Records(refunds={"rf_1": ("tx_1005", "requested")}, cards={"4242": "active", "8899": "frozen"},
                     requests={}, transfers={"tr_3002": "pending"})
    after = Records(refunds={"rf_1": ("tx_1005", "requested"), "rf_2": ("tx_1008", "executed")},
                    cards={"4242": "frozen", "8899": "active"}, requests={"sr_1": ("talk_to_person", "open")},
                    transfers={"tr_3002": "pending"})
    assert effect_changes(before, after) == ["card_frozen:4242", "card_unfrozen:8899", "refund_paid:tx_1008",
                                             "service_request:talk_to_person"]
    assert effect_changes(after, after) == []
    assert effect_matches("refund_paid", "refund_paid:tx_1008") and effect_matches("card_frozen:4242", "card_frozen:4242")
    assert not effect_matches("card_frozen:8899", "card_frozen:4242") and not effect_matches("refund", "refund_paid:x")


# ---------------------------------------------------------------------------------------------------- scoring


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    path = _write(tmp_path_factory.mktemp("tiny"), TINY)
    suite, _ = load_suite(path)
    return run_suite(suite, suite.select(), path=str(path), model="offline")


def test_a_tiny_suite_is_scored_right_and_wrong(tiny_report):
    by = {(t.conversation, t.index): t for t in tiny_report.turns}
    assert by["coffee", 0].right and by["coffee", 0].agent == "billing"
    paid = by["coffee", 1]
    assert paid.right and paid.effects == ("refund_paid:tx_1008",) and "refunds" in paid.path
    wrong = by["coffee", 2]  # the balance is the account agent's: the expectation "cards" fails
    assert wrong.agent == "account" and not wrong.agent_ok and not wrong.right and wrong.effects_ok
    missing = by["freeze", 1]
    assert missing.agent_ok and missing.missing == ("no such fact",) and not missing.right
    total = tiny_report.total
    assert (total.conversations, total.turns) == (2, 5)
    assert tiny_report.by_category["money"].right == 2 and tiny_report.by_category["money"].turns == 3


def test_forbidden_effects_are_counted_and_fail_the_turn(tiny_report):
    frozen = next(t for t in tiny_report.turns if (t.conversation, t.index) == ("freeze", 0))
    assert frozen.agent == "cards" and frozen.effects == ("card_frozen:4242",)
    assert frozen.forbidden == ("card_frozen:4242",) and not frozen.effects_ok and not frozen.right
    assert tiny_report.total.forbidden == 1 and tiny_report.by_category["cards"].forbidden == 1
    assert tiny_report.by_category["money"].forbidden == 0
    # the event log's handoff metrics are there: the coffee turns handed off
    assert tiny_report.total.handoffs_per_turn and tiny_report.total.fallbacks == 0
    assert tiny_report.total.bounce_backs == 0


def test_the_json_report_and_the_exit_codes(tmp_path):
    path = _write(tmp_path, TINY)
    out = tmp_path / "out"
    r = invoke_cli("eval", str(path), "--json", "--out", str(out), "--category", "money")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert {"suite", "path", "model", "split", "category", "seconds", "total", "by_category", "by_split", "turns"} <= set(doc)
    assert doc["suite"] == "tiny" and doc["model"] == "offline" and doc["category"] == "money"
    assert set(doc["total"]) >= {"turns", "right", "turn_accuracy", "agent_accuracy", "effect_accuracy", "forbidden",
                                 "hops_per_turn", "handoffs_per_turn", "bounce_backs", "fallbacks"}
    assert doc["total"]["turns"] == 3 and doc["total"]["right"] == 2
    turn = doc["turns"][2]
    assert set(turn) >= {"conversation", "say", "agent", "expected_agent", "effects", "forbidden", "missing", "text",
                         "path", "hops", "right"} and turn["right"] is False
    written = list(out.glob("eval-tiny-*.json"))
    assert len(written) == 1 and json.loads(written[0].read_text())["total"] == doc["total"]
    missed = invoke_cli("eval", str(path), "--category", "money", "--min-accuracy", "0.9")
    assert missed.exit_code == 1 and "failing turns" in missed.stdout and "coffee #3" in missed.stdout
    assert invoke_cli("eval", str(path), "--category", "money", "--min-accuracy", "0.6").exit_code == 0
    assert isinstance(invoke_cli("eval", str(path), "--split", "test").exception, InputError)
    nothing = invoke_cli("eval", str(path), "--category", "nope")
    assert isinstance(nothing.exception, InputError) and "no conversation matches" in str(nothing.exception)


# ---------------------------------------------------------------------------------------------------- OpenAI-compatible


def test_the_openai_compatible_path_is_scored_the_same_way(tmp_path, monkeypatch, stub):
    from nodes.testing.openai_stub import Reply, ToolCalls, agent_of, check_server, route

    def responder(request: dict, index: int):
        if agent_of(request) == "triage":
            return ToolCalls([route("billing", 0.95, "a question about fees")])
        # a new sentence each time: the desk never shows the same answer twice in a row (policies.answers)
        return Reply(f"Each ATM withdrawal costs £1.50 under the standard plan (request {index}).")

    srv = stub(responder)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
    path = _write(tmp_path, """
name: http
conversations:
  - id: fees
    category: fees
    turns:
      - {say: "what are your ATM fees?", agent: billing, mention: ["£1.50"]}
      - {say: "what is the fee for a withdrawal at a cash machine?", agent: billing, mention: ["£1.50"]}
      - {say: "and what's my balance?", agent: account, note: "the scripted model never routes there: must fail"}
""")
    suite, _ = load_suite(path)
    report = run_suite(suite, suite.select(), path=str(path), model="openai:stub")
    assert report.model == "openai:stub"
    first, second, third = report.turns
    assert first.right and first.agent == "billing" and "triage" in first.path, first
    assert second.right, second
    assert not third.right and third.agent == "billing" and third.error is None
    assert srv.requests and any(agent_of(r) == "triage" for r in srv.requests)
    check_server(srv)


# ---------------------------------------------------------------------------------------------------- the shipped suite

#: SHA-256 of the held-aside conversation ids of graph/suites/desk.yaml, sorted and joined by newlines: the split
#: was drawn once (seed 24, ``stratified_split``) and must not move.
HELD_SHA256 = "0ee6823f6e94909e9b64554e67ee015170ed18597ba386ba491b77d370e6011d"

CATEGORIES = {"typos", "vague_openers", "corrections", "two_questions", "back_references", "topic_changes",
              "thanks_bye", "frustration", "ask_for_person", "merchants_amounts_dates", "questions_not_actions",
              "non_english", "out_of_scope_products", "paused_thread"}


@pytest.fixture(scope="module")
def desk_suite() -> Suite:
    suite, path = load_suite("desk")
    assert path.name == "desk.yaml" and path.parent.name == "suites"
    return suite


def test_the_shipped_suite_has_the_conversations_the_issue_asks_for(desk_suite):
    convs = desk_suite.conversations
    assert len(convs) >= 200
    assert all(3 <= len(c.turns) <= 6 and c.messages >= 3 for c in convs), \
        [c.id for c in convs if not 3 <= len(c.turns) <= 6 or c.messages < 3]
    assert {c.category for c in convs} == CATEGORIES == set(desk_suite.categories)
    expected_agents = {a for c in convs for t in c.turns for a in t.agent}
    assert {"triage", "billing", "refunds", "cards", "transfers", "account", "policy", "fallback",
            "out_of_scope"} <= expected_agents
    assert any(t.decide == "approve" for c in convs for t in c.turns)
    assert any(t.decide == "reject" for c in convs for t in c.turns)
    assert {c.customer for c in convs} == {"c_ada", "c_bob"}
    languages = {c.id.split("-")[1] for c in convs if c.category == "non_english"}
    assert {"es", "fr", "de", "it", "pt"} <= languages
    products = " ".join(t.say or "" for c in convs if c.category == "out_of_scope_products" for t in c.turns).lower()
    assert all(p in products for p in ("savings", "loan", "overdraft", "mortgage", "invest"))


def test_the_split_is_fixed(desk_suite):
    convs = desk_suite.conversations
    assert desk_suite.split["seed"] == 24
    assert {c.id: c.split for c in convs} == stratified_split(convs, 24)
    held = sorted(c.id for c in convs if c.split == "held")
    assert len(held) * 3 == len(convs)
    for category in CATEGORIES:
        mine = [c for c in convs if c.category == category]
        assert sum(c.split == "held" for c in mine) == round(len(mine) / 3), category
    assert hashlib.sha256("\n".join(held).encode()).hexdigest() == HELD_SHA256


def test_a_sample_of_the_shipped_suite_runs_through_the_graph(desk_suite):
    sample = [next(c for c in desk_suite.conversations if c.category == k) for k in ("paused_thread", "non_english")]
    report = run_suite(desk_suite, sample, model="offline")
    assert report.total.conversations == 2 and report.total.turns == sum(c.messages for c in sample)
    paused = [t for t in report.turns if t.conversation == sample[0].id]
    assert paused[0].effects == ("refund_requested:tx_1001",) and paused[0].right, paused[0]
    assert all(t.error is None for t in report.turns), [t.error for t in report.turns]


def _main_eval(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    from graph.app.cli import main

    monkeypatch.setattr(sys, "argv", ["switchboard", "eval", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


ONE_TURN = "conversations:\n  - id: one\n    category: c\n    turns: [{say: hello, agent: any}]\n"


@pytest.mark.parametrize("name", ["../../escaped", "a/b", "..", ".hidden", "x\\\\y"])
def test_a_suite_name_that_is_a_path_is_refused_before_any_run(tmp_path, monkeypatch, capsys, name):
    """The name is part of the file --out writes: a name with a folder separator or ".." could write outside it."""
    path = _write(tmp_path, f'name: "{name}"\n' + ONE_TURN)
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path / "home"))
    code, out, err = _main_eval(monkeypatch, capsys, str(path), "--out", str(tmp_path / "reports"))
    assert (code, out) == (2, "") and err.count("\n") == 1 and err.startswith("error: ") and "name" in err, err
    assert not (tmp_path / "home").exists() and not any(tmp_path.parent.glob("escaped*"))


@pytest.mark.parametrize("content, says", [
    (b"\xff\xfe\x00", "cannot read the suite"),
    (b"name: x\nconversations: [", "not valid YAML"),
    (b"!!python/object/apply:os.system ['echo pwned']\n", "not valid YAML"),
    (b"a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
     b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nname: s\nconversations: *e\n",
     "conversation #1: Input should be a valid dictionary"),
    (b"name: s\nhome: /tmp\n" + ONE_TURN.encode(), "home: Extra inputs are not permitted"),
    (b"name: s\noperators: [c_ada]\n" + ONE_TURN.encode(), "is the id of a customer"),
    (b"name: s\nconversations:\n  - id: one\n    category: c\n    customer: c_zzz\n    turns: [{say: hi, agent: any}]\n",
     "'c_zzz' is not a customer of the demo bank"),
])
def test_a_hostile_suite_is_one_error_line_exit_2_and_nothing_written(tmp_path, monkeypatch, capsys, content, says):
    path = tmp_path / "suite.yaml"
    path.write_bytes(content)
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path / "home"))
    code, out, err = _main_eval(monkeypatch, capsys, str(path), "--out", str(tmp_path / "reports"))
    assert (code, out) == (2, "") and err.count("\n") == 1 and err.startswith("error: ") and says in err, err
    assert not (tmp_path / "home").exists()
    assert not (tmp_path / "reports").exists() or not list((tmp_path / "reports").iterdir())


def test_an_out_folder_that_cannot_be_made_is_said_before_the_run(tmp_path, monkeypatch, capsys):
    import graph.app.eval_run as eval_run

    def must_not_run(*args, **kwargs):
        raise AssertionError("the suite ran before --out was checked")

    monkeypatch.setattr(eval_run, "run_suite", must_not_run)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    path = _write(tmp_path, "name: s\n" + ONE_TURN)
    code, out, err = _main_eval(monkeypatch, capsys, str(path), "--out", str(blocker / "reports"))
    assert (code, out) == (2, "") and err.count("\n") == 1 and err.startswith("error: "), err
