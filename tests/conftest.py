"""Shared fixtures: an isolated SWITCHBOARD_HOME per test, a keyword router, graph factories."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# the HTTP attack catalogue asserts in a helper module: pytest rewrites its asserts (before it is imported)
pytest.register_assert_rewrite("nodes.testing.http_attacks", "nodes.testing.served")

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from graph.contracts.context import RunContext  # noqa: E402
from nodes.testing.scripted import KeywordRouter, KwRoute  # noqa: E402, F401  (re-exported for tests)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data" / "banking77"
#: DSN of a PostgreSQL server for the tests marked ``postgres`` (e.g. postgresql://postgres@127.0.0.1:5432/test);
#: each such test creates and drops its own database there. Unset: those tests are deselected.
POSTGRES_ENV = "SWITCHBOARD_TEST_POSTGRES"


#: Path of the separate virtual environment of ``switchboard serve --engine langgraph-pg`` (``make langgraph-pg``) for
#: the tests marked ``langgraph_pg``; unset: those tests are deselected.
LANGGRAPH_PG_ENV = "SWITCHBOARD_TEST_LANGGRAPH_PG"


def pytest_collection_modifyitems(config, items):
    """Deselect (not skip) the tests marked ``postgres`` when SWITCHBOARD_TEST_POSTGRES is not set, and those marked
    ``langgraph_pg`` when SWITCHBOARD_TEST_LANGGRAPH_PG is not set."""
    for marker, env, key in (("postgres", POSTGRES_ENV, _PG_DESELECTED), ("langgraph_pg", LANGGRAPH_PG_ENV, _LG_DESELECTED)):
        if os.environ.get(env):
            continue
        deselected = [item for item in items if item.get_closest_marker(marker)]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if not item.get_closest_marker(marker)]
        config.stash[key] = len(deselected)


_PG_DESELECTED = pytest.StashKey[int]()
_LG_DESELECTED = pytest.StashKey[int]()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line saying whether the PostgreSQL tests ran."""
    deselected = config.stash.get(_PG_DESELECTED, 0)
    if os.environ.get(POSTGRES_ENV):
        terminalreporter.write_line(f"postgres: tests marked postgres ran against {POSTGRES_ENV}")
    elif deselected:
        terminalreporter.write_line(f"postgres: {deselected} tests marked postgres deselected "
                                    f"({POSTGRES_ENV} is not set)")
    if config.stash.get(_LG_DESELECTED, 0):
        terminalreporter.write_line(f"langgraph-pg: {config.stash[_LG_DESELECTED]} tests marked langgraph_pg deselected "
                                    f"({LANGGRAPH_PG_ENV} is not set)")


@contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh, empty database ``sb_test_<hex>`` on the server of SWITCHBOARD_TEST_POSTGRES; yields its URL and
    drops it afterwards (closing this process's pooled connections to it first)."""
    import psycopg
    from sqlalchemy.engine import make_url

    from checkpoints.business.engine import dispose, resolve_url

    dsn = os.environ.get(POSTGRES_ENV)
    if not dsn:
        pytest.fail(f"{POSTGRES_ENV} is not set (tests marked postgres should have been deselected)")
    name = f"sb_test_{uuid.uuid4().hex[:12]}"
    url = make_url(dsn).set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url
    finally:
        dispose(resolve_url(url))
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def business_url(request, tmp_path) -> Iterator[str]:
    """Where a business store test keeps its database: a fresh SQLite file, and (marked ``postgres``) a fresh
    PostgreSQL database; tests using it run once per engine."""
    if request.param == "sqlite":
        yield str(tmp_path / "business.db")
        return
    with postgres_database() as url:
        yield url


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """Every test gets its own SWITCHBOARD_HOME (databases, cached router) and no model env vars (so no test can
    reach a real model server by accident)."""
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path / "home"))
    for var in ("SWITCHBOARD_MODEL", "SWITCHBOARD_DB", "SWITCHBOARD_MAX_HOPS", "SWITCHBOARD_MODEL_TIMEOUT",
                "SWITCHBOARD_MODEL_RETRIES", "SWITCHBOARD_ROUTING", "SWITCHBOARD_MAX_INPUT_TOKENS",
                "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "home"


@pytest.fixture
def kw_router():
    return KeywordRouter()


@pytest.fixture
def store(isolated_home):
    """The demo business store at ``$SWITCHBOARD_HOME/business.db`` (the file ``Settings()`` names, so a
    ``Conversation`` built on a plain graph finds the same store)."""
    from checkpoints.business import open_store

    return open_store(isolated_home / "business.db")


@pytest.fixture
def make_desk(kw_router, store):
    """``make_desk(model, checkpointer=None, router=None, history=None, events=None, tracer_provider=None, **settings)``
    -> a Desk (compiled graph + deps) with the keyword router and the test's business store."""
    from graph.builder import build_desk
    from graph.contracts.settings import Settings

    def _make(model=None, checkpointer=None, router=None, history=None, events=None, tracer_provider=None, **settings):
        from nodes.embedded.offline_model import OfflineChatModel

        r = router or kw_router
        return build_desk(model=model or OfflineChatModel(router=r), checkpointer=checkpointer or InMemorySaver(),
                          settings=Settings.from_env(**settings), router=r, store=store, history=history, events=events,
                          tracer_provider=tracer_provider)

    return _make


@pytest.fixture
def make_graph(make_desk):
    """``make_graph(...)`` -> the compiled graph of ``make_desk(...)`` (same arguments)."""

    def _make(*args, **kwargs):
        return make_desk(*args, **kwargs).graph

    return _make


def banking77() -> Path:
    """The BANKING77 folder; fails (never skips) when it is missing."""
    if not (SHARED_DATA / "test.csv").exists():
        pytest.fail(f"BANKING77 data missing at {SHARED_DATA}; tests that read ../shared/data must not be skipped")
    return SHARED_DATA


# ------------------------------------------------------------------ scenarios shared by several test modules
# (test modules import these from here, never from one another)

#: A refund above the auto-approval limit (£23.80): it waits for an approver.
BIG = "I want a refund for tx_1001 please, that Tesco order never happened"
#: A refund under the auto-approval limit (£4.50): paid at once.
SMALL = "Please refund tx_1008, it was a duplicate coffee"
#: A message the shipped router sends to billing.
TWICE = "I think I was charged twice for my coffee"
#: Operator ann of tenant t_demo, an approver in :func:`approver_desk`.
ANN = RunContext.for_operator("ann", "t_demo")


def approver_desk(home: Path, router=None):
    """``(graph, store)`` of a desk on ``home`` (its SQLite checkpoints and business store) with ``router`` (default the
    keyword router) and two registered approvers, ann (:data:`ANN`) and ben, of tenant t_demo."""
    from checkpoints import open_checkpointer
    from graph.builder import build_desk
    from graph.contracts.settings import Settings
    from nodes.embedded.offline_model import OfflineChatModel

    s = Settings.from_env(db=home / "switchboard.db", business_db=home / "business.db")
    r = router if router is not None else KeywordRouter()
    d = build_desk(model=OfflineChatModel(router=r), checkpointer=open_checkpointer(s.db), settings=s, router=r)
    for name in ("ann", "ben"):
        if d.deps.store.get_operator(name) is None:
            d.deps.store.add_operator(name, "t_demo", ["approver"])
    return d.graph, d.deps.store


def executed_refunds(store) -> list:
    """Ada's refunds that were paid."""
    return [r for r in store.list_refunds("c_ada") if r.status == "executed"]


def paused_conversation(home: Path):
    """``(graph, store, conversation)``: :func:`approver_desk` on ``home`` with the shipped router (the paused dialogue
    routes the questions it answers) and thread ``c1`` paused on :data:`BIG`."""
    from graph.conversation import Conversation
    from nodes.router import load_router

    g, store = approver_desk(home, router=load_router())
    conv = Conversation("c1", graph=g, store=store)
    assert conv.send(BIG).status == "awaiting_approval"
    return g, store, conv


def tx1001_refund_statuses(store) -> list[str]:
    """The statuses of Ada's refunds of transaction tx_1001, oldest first."""
    return [x.status for x in store.list_refunds("c_ada") if x.transaction_id == "tx_1001"]


@pytest.fixture
def desk(store):
    """A desk with the offline model and the shipped default router on the test's business store (in-memory
    checkpoints)."""
    from graph.builder import build_desk
    from graph.contracts.settings import Settings
    from nodes.embedded.offline_model import OfflineChatModel
    from nodes.router import default_router

    router = default_router()
    return build_desk(model=OfflineChatModel(router=router), checkpointer=InMemorySaver(), settings=Settings.from_env(),
                      router=router, store=store)


def play_content_turns(desk, thread: str, turns) -> None:
    """Send each ``(message, agent, must, must_not)`` turn on ``thread`` and check the answering agent (``a|b``: any
    of them) and the substrings its answer must and must not contain."""
    from graph.conversation import Conversation

    conv = Conversation(thread, desk=desk)
    for text, agent, must, must_not in turns:
        r = conv.send(text)
        assert r.agent in agent.split("|"), (text, r.agent, r.text)
        assert all(m in r.text for m in must), (text, r.text)
        assert not any(m in r.text for m in must_not), (text, r.text)


@pytest.fixture
def home(isolated_home, monkeypatch):
    """For the operator CLI tests: a home with a paused refund on thread ``p`` (c_ada), approvers ann and ben, an
    agent ``agt``, an admin ``ida``, and the CLI's tables wide enough for the assertions."""
    from rich.console import Console

    from graph.app import cli, operator_cli
    from graph.conversation import Conversation

    g, store = approver_desk(isolated_home)
    store.add_operator("agt", "t_demo", ["agent"])
    store.add_operator("ida", "t_demo", ["admin"])
    Conversation("p", graph=g).send(BIG)
    monkeypatch.setattr(cli, "console", Console(width=250))
    monkeypatch.setattr(operator_cli, "console", Console(width=250))
    monkeypatch.delenv("SWITCHBOARD_OPERATOR", raising=False)
    return isolated_home


def invoke_cli(*args: str):
    """``switchboard ARGS…`` in this process (typer's CliRunner): the result has ``exit_code``, ``output``."""
    from typer.testing import CliRunner

    from graph.app.cli import app

    return CliRunner().invoke(app, list(args))


#: The event sequence of one turn in which triage hands to billing, billing to refunds, and refunds answers
#: (``nodes.testing.scripted.two_hop_model``): ``(kind, agent, from_agent, to_agent, status)``.
TWO_HANDOFFS = [
    ("run_started", None, None, None, None),
    ("entry_decided", "entry", None, "triage", None),
    ("agent_started", "triage", "entry", None, None),
    ("model_called", "triage", None, None, None),
    ("handoff_requested", "triage", "triage", "billing", None),
    ("handoff_accepted", "triage", "triage", "billing", None),
    ("agent_finished", "triage", None, "billing", "handoff"),
    ("agent_started", "billing", "triage", None, None),
    ("model_called", "billing", None, None, None),
    ("handoff_requested", "billing", "billing", "refunds", None),
    ("handoff_accepted", "billing", "billing", "refunds", None),
    ("agent_finished", "billing", None, "refunds", "handoff"),
    ("agent_started", "refunds", "billing", None, None),
    ("model_called", "refunds", None, None, None),
    ("agent_finished", "refunds", None, "__end__", "answered"),
    ("run_completed", None, None, "refunds", "answered"),
]


def parse_adjacency(text: str) -> dict[str, list[str]]:
    """The listing ``switchboard draw`` prints when the drawing is too wide: ``[* ]source -> t1, t2[3,5], ...`` per
    node, continuation lines indented. Returns source -> targets as printed (hop marks kept)."""
    import re

    listing = text.split("\nuse --format mermaid or --format png for the full drawing\n")[0]
    out: dict[str, list[str]] = {}
    source = None
    for line in listing.splitlines():
        if " -> " in line:
            head, _, rest = line.partition(" -> ")
            source = head.lstrip("* ").strip()
            assert source not in out, f"{source} listed twice"
            out[source] = []
        else:
            assert source is not None and line.startswith(" "), line
            rest = line
        out[source] += [t.strip() for t in re.split(r",(?![^\[]*\])", rest) if t.strip()]  # not [3,5]
    return out


def listed_edges(text: str) -> set[tuple[str, str]]:
    """The ``(source, target)`` edges of :func:`parse_adjacency`'s listing, hop marks dropped."""
    import re

    return {(s, re.sub(r"\[[0-9,]+\]$", "", t)) for s, ts in parse_adjacency(text).items() for t in ts if t != "(none)"}


#: Ten labelled queries for ``switchboard route``: three desk agents' labels, four out-of-scope, three conversational.
ROUTE_ROWS = [
    ("my debit card was stolen on the train yesterday", "card_gone"),
    ("why was I charged a fee twice on my statement", "odd_fee"),
    ("how do I send money to my sister's account", "send_money"),
    ("what will the weather be like in Lisbon tomorrow", "weather_q"),
    ("can you suggest a good recipe for lentil soup", "cooking_q"),
    ("book me a table for two at an italian restaurant tonight", "restaurant_q"),
    ("I want to get a mortgage for a new house", "mortgage_q"),
    ("thanks so much", "thanks_q"),
    ("hi there", "hello_q"),
    ("are you a real person or a bot", "bot_q"),
]
#: The label map of :data:`ROUTE_ROWS` (``agents`` and ``no_specialist`` sections).
ROUTE_LABELS = {"agents": {"cards": ["card_gone"], "billing": ["odd_fee"], "transfers": ["send_money"]},
                "no_specialist": {"out_of_scope": ["weather_q", "cooking_q", "restaurant_q", "mortgage_q"],
                                  "conversational": ["thanks_q", "hello_q", "bot_q"]}}


def write_route_files(tmp_path: Path, labels: dict = ROUTE_LABELS) -> tuple[Path, Path]:
    """``(queries CSV, label map JSON)`` of :data:`ROUTE_ROWS` written under ``tmp_path``."""
    import json

    csv = tmp_path / "q.csv"
    csv.write_text("text,category\n" + "".join(f'"{t}",{c}\n' for t, c in ROUTE_ROWS))
    amap = tmp_path / "map.json"
    amap.write_text(json.dumps(labels))
    return csv, amap


@pytest.fixture
def stub():
    """``stub(script) -> ScriptedOpenAIServer`` started on 127.0.0.1; closed after the test."""
    from nodes.testing.openai_stub import ScriptedOpenAIServer

    servers: list[ScriptedOpenAIServer] = []

    def start(script, **kw) -> ScriptedOpenAIServer:
        srv = ScriptedOpenAIServer(script, **kw).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.close()


@pytest.fixture
def env_graph(monkeypatch, kw_router, store):
    """``env_graph(base_url, **env) -> Desk`` built the way the CLI builds it: from environment variables
    (``SWITCHBOARD_MODEL=openai:stub``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, and ``env``)."""
    from graph.builder import build_desk
    from graph.contracts.settings import Settings

    def make(base_url: str, **env: str):
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
        monkeypatch.setenv("OPENAI_BASE_URL", base_url)
        monkeypatch.setenv("SWITCHBOARD_MODEL", "openai:stub")
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        return build_desk(checkpointer=InMemorySaver(), settings=Settings.from_env(), router=kw_router, store=store)

    return make
