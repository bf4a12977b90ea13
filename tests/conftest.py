"""Shared fixtures: an isolated SWITCHBOARD_HOME per test, a keyword router, graph factories."""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from nodes.scripted_models import KeywordRouter, KwRoute  # noqa: F401  (re-exported for tests)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data" / "banking77"


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """Every test gets its own SWITCHBOARD_HOME (databases, cached router) and no model env vars (so no test can
    reach a real model server by accident)."""
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path / "home"))
    for var in ("SWITCHBOARD_MODEL", "SWITCHBOARD_DB", "SWITCHBOARD_MAX_HOPS", "SWITCHBOARD_MODEL_TIMEOUT",
                "SWITCHBOARD_MODEL_RETRIES", "SWITCHBOARD_ROUTING", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "home"


@pytest.fixture
def kw_router():
    return KeywordRouter()


@pytest.fixture
def store(isolated_home):
    """The demo business store at ``$SWITCHBOARD_HOME/business.db`` (the file ``Settings()`` names, so a
    ``Conversation`` built on a plain graph finds the same store)."""
    from nodes.store import open_store

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
