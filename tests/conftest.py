"""Shared fixtures: an isolated SWITCHBOARD_HOME per test, a keyword router, graph factories."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# the HTTP attack catalogue asserts in a helper module: pytest rewrites its asserts (before it is imported)
pytest.register_assert_rewrite("nodes.testing.http_attacks")

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

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
    """``make_desk(model, checkpointer=None, router=None, history=None, events=None, **settings)`` -> a Desk (compiled
    graph + deps) with the keyword router and the test's business store."""
    from graph.builder import build_desk
    from graph.settings import Settings

    def _make(model=None, checkpointer=None, router=None, history=None, events=None, **settings):
        from nodes.offline_model import OfflineChatModel

        r = router or kw_router
        return build_desk(model=model or OfflineChatModel(router=r), checkpointer=checkpointer or InMemorySaver(),
                          settings=Settings.from_env(**settings), router=r, store=store, history=history, events=events)

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
