"""CLI: route, train-router, chat, threads, history, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import banking77

pytestmark = [pytest.mark.subprocess]

REPO = Path(__file__).resolve().parents[2]


def _cli(home: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "SWITCHBOARD_HOME": str(home), "COLUMNS": "200"}
    env.pop("SWITCHBOARD_MODEL", None)
    return subprocess.run([sys.executable, "-m", "graph.app.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=env, **kw)


def test_route_on_real_queries_reports_every_figure(isolated_home, tmp_path):
    data = banking77()
    out = tmp_path / "fig.json"
    r = _cli(isolated_home, "route", str(data / "test.csv"), "--labels", str(data / "agent_map.json"),
             "--limit", "60", "--json", str(out))
    assert r.returncode == 0, r.stderr
    fig = json.loads(out.read_text())
    assert fig["queries"] == 60 and 0.0 <= fig["accuracy_answering_agent"] <= 1.0
    assert fig["accuracy_answering_agent"] >= 0.7  # the shipped router on the first 60 rows
    for key in ("handoffs_per_query", "p50_s", "p95_s"):
        assert key in fig
    assert "confusion" in r.stdout and "recall" in r.stdout


def test_train_router_then_route_uses_it(isolated_home, tmp_path):
    rows = ["text,category"] + [f"my card {w} is broken,card_not_working" for w in "abcdefgh"] + \
           [f"I was charged a fee {w} times,card_payment_fee_charged" for w in "abcdefgh"]
    csv = tmp_path / "mini.csv"
    csv.write_text("\n".join(rows) + "\n")
    labels = tmp_path / "map.json"
    labels.write_text(json.dumps({"agents": {"cards": ["card_not_working"], "billing": ["card_payment_fee_charged"]}}))
    r = _cli(isolated_home, "train-router", str(csv), "--labels", str(labels))
    assert r.returncode == 0, r.stderr
    assert (isolated_home / "router-trained.npz").exists()
    r2 = _cli(isolated_home, "route", str(csv), "--labels", str(labels), "--json", str(tmp_path / "f.json"))
    assert r2.returncode == 0, r2.stderr
    fig = json.loads((tmp_path / "f.json").read_text())
    assert fig["router"] == str(csv) and fig["accuracy_answering_agent"] >= 0.9


def _operator(home: Path, name: str = "ann", *roles: str) -> None:
    from checkpoints.business import open_store

    open_store(home / "business.db").add_operator(name, "t_demo", list(roles or ("agent",)))


def test_chat_threads_history(isolated_home):
    r = _cli(isolated_home, "chat", "Where is my refund?", "--thread", "t1")
    assert r.returncode == 0, r.stderr
    assert "refunds" in r.stdout and "path:" in r.stdout
    r = _cli(isolated_home, "chat", "and my card was stolen", "--thread", "t1")
    assert r.returncode == 0 and "cards" in r.stdout
    _operator(isolated_home)
    t = _cli(isolated_home, "threads", "--as", "ann")
    assert t.returncode == 0 and "t1" in t.stdout
    h = _cli(isolated_home, "history", "t1", "--as", "ann")
    assert h.returncode == 0 and "refunds" in h.stdout and "cards" in h.stdout


def test_bad_input_one_line_errors(isolated_home, tmp_path):
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("question,label\nhi,x\n")
    labels = tmp_path / "map.json"
    labels.write_text("{not json")
    cases = [
        ("route", str(bad_csv), "--labels", str(labels)),
        ("route", str(tmp_path / "missing.csv"), "--labels", str(labels)),
        ("chat", "   ", "--thread", "t"),
        ("history", "nope"),
        ("history", "nope", "--as", "nobody"),
        ("draw", "--format", "png"),
    ]
    for args in cases:
        r = _cli(isolated_home, *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, r.stderr)


def test_bad_configuration_one_line_errors(isolated_home):
    env = {**os.environ, "SWITCHBOARD_HOME": str(isolated_home), "SWITCHBOARD_MAX_HOPS": "abc"}
    r = subprocess.run([sys.executable, "-m", "graph.app.cli", "chat", "hi"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: invalid setting max_hops (SWITCHBOARD_MAX_HOPS): ") and "'abc'" in r.stderr
    env = {**os.environ, "SWITCHBOARD_HOME": str(isolated_home), "SWITCHBOARD_MODEL": "garbage"}
    r = subprocess.run([sys.executable, "-m", "graph.app.cli", "chat", "hi"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 2 and "unknown model 'garbage'" in r.stderr
    assert not (isolated_home / "switchboard.db").exists()  # nothing was created


def test_concurrent_turns_on_one_thread_are_serialised(isolated_home):
    """Four processes chat on the same thread at once: every turn is stored with its answer (none lost)."""
    env = {**os.environ, "SWITCHBOARD_HOME": str(isolated_home)}
    env.pop("SWITCHBOARD_MODEL", None)
    _cli(isolated_home, "chat", "hello, where is my refund?", "--thread", "cc")  # creates the thread
    procs = [subprocess.Popen([sys.executable, "-m", "graph.app.cli", "chat", f"where is my new card {i}", "--thread", "cc"],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(4)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    from checkpoints import open_checkpointer
    from checkpoints.threads import thread_turns

    turns = thread_turns(open_checkpointer(isolated_home / "switchboard.db"), "cc")
    assert len(turns) == 5
    assert all(t["agent"] and t["answer"] for t in turns), turns


def test_new_home_lists_are_empty_not_errors(isolated_home):
    _operator(isolated_home)
    for args, text in ((("threads",), "no threads yet"), (("pending",), "nothing is waiting"), (("stats",), "no runs")):
        r = _cli(isolated_home, *args, "--as", "ann")
        assert r.returncode == 0 and text in r.stdout, (args, r.stdout, r.stderr)


def test_unwritable_outputs_are_one_line_errors(isolated_home, tmp_path):
    r = _cli(isolated_home, "draw", "--format", "mermaid", "--out", str(tmp_path / "nope" / "x.mmd"))
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    r = _cli(isolated_home, "stats", "--since", "99999999d", "--db", str(tmp_path / "x.db"))
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_error_lines_print_square_brackets_as_they_are(monkeypatch, capsys):
    # Rich markup is off: "[serve]" of the install hint is no style tag, so it is printed as it is
    import importlib.util

    from graph.app import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "aegra_api" else real(name, *a))
    monkeypatch.setattr(sys, "argv", ["switchboard", "serve", "--db", "postgresql://u@127.0.0.1:1/d"])
    with pytest.raises(SystemExit) as info:
        cli.main()
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "[serve]" in lines[0] and lines[0].startswith("error: engine aegra is not installed")
    cli.error_line("the file [bold]x[/bold] is [red] bad")
    assert capsys.readouterr().err == "error: the file [bold]x[/bold] is [red] bad\n"
