"""HTTP attacks on the money path of ``switchboard serve`` (Aegra 0.6, two instances over one fresh PostgreSQL
database), driven over plain HTTP: the catalogue and what each attack asserts (the answer, the ledger, the thread
afterwards) are in ``nodes/testing/http_attacks.py``; one server for the module.

Also here: ``switchboard tasks --stuck`` lists a refund paused on a thread Aegra marked ``error`` (Aegra then refuses
every resume of it).
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
from tests.conftest import postgres_database

pytestmark = [pytest.mark.postgres, pytest.mark.subprocess, pytest.mark.slow]


def attack_params() -> list:
    """One pytest param per attack, id ``<class>--<name>`` (slugged)."""
    return [pytest.param(a, id=re.sub(r"[^a-z0-9]+", "-", f"{a.cls}--{a.name}".lower()).strip("-")) for a in ATTACKS]


@pytest.fixture(scope="module")
def aegra(tmp_path_factory) -> Iterator[Arena]:
    with postgres_database() as url, arena(url, tmp_path_factory.mktemp("attacks"), "aegra") as a:
        yield a


@pytest.mark.parametrize("attack", attack_params())
def test_attack(aegra: Arena, attack) -> None:
    attack.run(aegra)


def stuck_tasks(a: Arena) -> list[dict]:
    """``switchboard tasks --stuck --json --as ann`` over the served database."""
    home = a.served.out.parent / "home"
    env = {**os.environ, "SWITCHBOARD_HOME": str(home), "SWITCHBOARD_DB": a.served.url}
    done = subprocess.run([str(Path(sys.executable).parent / "switchboard"), "tasks", "--stuck", "--json", "--as",
                           "ann", "--db", a.served.url], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_tasks_stuck_lists_a_refund_paused_on_a_thread_aegra_marked_failed(aegra: Arena) -> None:
    import psycopg

    from checkpoints.postgres import libpq_url

    p = aegra.paused()
    assert p.task_id not in {i["id"] for i in stuck_tasks(aegra)}  # paused and resumable: not stuck
    with psycopg.connect(libpq_url(aegra.served.url), autocommit=True) as conn:  # what a failed run leaves
        conn.execute("UPDATE thread SET status = 'error' WHERE thread_id = %s", (p.thread,))
    [item] = [i for i in stuck_tasks(aegra) if i["id"] == p.task_id]
    assert item["stuck"] and "engine status error" in item["stuck_because"]
    assert f"switchboard resume {p.thread}" in item["stuck_because"]
