"""The HTTP attacks of ``nodes/testing/http_attacks.py`` against ``switchboard serve --engine langgraph-pg``
(LangGraph's Agent Server, langgraph-api 0.11.1, on the MIT PostgreSQL + Redis runtime; two instances over one fresh
database and the local Redis); one server for the module. Runs only when SWITCHBOARD_TEST_LANGGRAPH_PG names the
engine's virtual environment (``make langgraph-pg``) and SWITCHBOARD_TEST_POSTGRES a server.

Also here: ``switchboard tasks --stuck`` lists a refund paused on a thread the runtime marked ``error``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodes.testing.http_attacks import ATTACKS, Arena, arena
from tests.conftest import LANGGRAPH_PG_ENV, postgres_database

pytestmark = [pytest.mark.postgres, pytest.mark.langgraph_pg, pytest.mark.subprocess, pytest.mark.slow]


@pytest.fixture(scope="module")
def lg_pg(tmp_path_factory) -> Iterator[Arena]:
    venv = os.environ[LANGGRAPH_PG_ENV]
    with postgres_database() as url, arena(url, tmp_path_factory.mktemp("attacks-lg"), "langgraph-pg",
                                           "--engine-venv", venv) as a:
        yield a


@pytest.mark.parametrize("attack", [
    pytest.param(a, id=re.sub(r"[^a-z0-9]+", "-", f"{a.cls}--{a.name}".lower()).strip("-")) for a in ATTACKS])
def test_attack(lg_pg: Arena, attack) -> None:
    attack.run(lg_pg)


def test_tasks_stuck_lists_a_refund_paused_on_a_thread_the_runtime_marked_failed(lg_pg: Arena) -> None:
    import psycopg

    from checkpoints.postgres import libpq_url

    p = lg_pg.paused()
    with psycopg.connect(libpq_url(lg_pg.served.url), autocommit=True) as conn:
        conn.execute("UPDATE threads SET status = 'error' WHERE thread_id = %s", (p.thread,))
    env = {**os.environ, "SWITCHBOARD_HOME": str(lg_pg.served.out.parent / "home"), "SWITCHBOARD_DB": lg_pg.served.url}
    done = subprocess.run([str(Path(sys.executable).parent / "switchboard"), "tasks", "--stuck", "--json", "--as",
                           "ann", "--db", lg_pg.served.url], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    [item] = [i for i in json.loads(done.stdout) if i["id"] == p.task_id]
    assert item["stuck"] and "engine status error" in item["stuck_because"]
