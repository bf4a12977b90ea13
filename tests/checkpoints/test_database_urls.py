"""``--db`` / ``SWITCHBOARD_DB`` / ``SWITCHBOARD_BUSINESS_DB`` with an unsupported URL scheme is a one-line
configuration error (exit 2), never a relative path: ``mysql://x`` once created a directory ``./mysql:``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoints import open_checkpointer
from graph.contracts.errors import ConfigError
from graph.contracts.settings import Settings, check_database_target

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("target", ["mysql://x", "MySQL://u@h/db", "redis://127.0.0.1:6379/0", "file:///tmp/x.db"])
def test_unsupported_schemes_are_refused_everywhere(isolated_home, target, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^unsupported database URL '.*' \(use a SQLite file path or postgresql://"):
        Settings(db=target)
    with pytest.raises(ConfigError, match="unsupported database URL"):
        Settings(business_db=target)
    monkeypatch.setenv("SWITCHBOARD_DB", target)
    with pytest.raises(ConfigError, match="unsupported database URL"):
        Settings.from_env()
    with pytest.raises(ConfigError, match="unsupported database URL"):
        open_checkpointer(target)
    assert list(tmp_path.iterdir()) == []  # no directory named after the scheme


def test_the_password_is_hidden_and_supported_targets_pass():
    with pytest.raises(ConfigError) as info:
        check_database_target("mysql://ann:s3cret@db.example/x")
    assert "s3cret" not in str(info.value) and "ann:***@" in str(info.value)
    for ok in ("h/switchboard.db", "memory", "sqlite:///h/x.db", "postgresql://postgres@127.0.0.1/test",
               "postgres://u@h/d", "postgresql+psycopg://u@h/d", "C:/data/x.db", "odd:name.db"):
        assert check_database_target(ok) == ok


@pytest.mark.subprocess
def test_the_cli_says_so_in_one_line_and_creates_nothing(tmp_path):
    env = {**os.environ, "SWITCHBOARD_HOME": str(tmp_path / "home")}
    r = subprocess.run([sys.executable, "-m", "graph.app.cli", "chat", "hi", "--db", "mysql://x"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env={**env, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: unsupported database URL 'mysql://x' (use a SQLite file path or postgresql://…)"], r.stderr
    assert list(tmp_path.iterdir()) == []


# -- a SQLite file in a folder that does not exist: refused unless the folder is in the home -------------------------

def _missing(tmp_path: Path) -> list[str]:
    far = tmp_path / "nonexistent" / "dir" / "x.db"
    return [str(far), f"sqlite:///{far}"]


@pytest.mark.parametrize("setting, env", [("db", "SWITCHBOARD_DB"), ("business_db", "SWITCHBOARD_BUSINESS_DB")])
def test_a_sqlite_file_in_a_missing_folder_outside_the_home_is_refused(isolated_home, tmp_path, monkeypatch,
                                                                       setting, env):
    for target in _missing(tmp_path):
        with pytest.raises(ConfigError) as info:
            Settings(**{setting: target})
        assert str(info.value) == (f"invalid setting {setting} ({env}): the folder {tmp_path / 'nonexistent' / 'dir'} "
                                   f"does not exist; create it first (only the home folder {isolated_home} is created "
                                   "for you)")
        monkeypatch.setenv(env, target)
        with pytest.raises(ConfigError, match=f"^invalid setting {setting} "):
            Settings.from_env()
        monkeypatch.delenv(env)
    assert list(tmp_path.iterdir()) == []  # nothing made, not even the home


def test_existing_folders_the_home_memory_and_servers_pass(isolated_home, tmp_path):
    (tmp_path / "here").mkdir()
    for ok in (tmp_path / "here" / "x.db", f"sqlite:///{tmp_path / 'here' / 'x.db'}", isolated_home / "a" / "b" / "x.db",
               "x.db", "memory", "postgresql://u@h/d"):
        assert Settings(db=ok).db == str(ok)
    assert Settings(business_db=isolated_home / "deep" / "b.db").business_db == str(isolated_home / "deep" / "b.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]


@pytest.mark.parametrize("args", [["chat", "hello"], ["threads", "--as", "ann"], ["pending", "--as", "ann"],
                                  ["db", "upgrade"], ["route", "QUERIES"]],
                         ids=["chat", "threads", "pending", "db-upgrade", "route"])
def test_every_command_refuses_a_missing_db_folder_in_one_line_creating_nothing(isolated_home, tmp_path, monkeypatch,
                                                                                 capsys, args):
    from graph.app import cli

    queries = tmp_path / "in" / "q.csv"
    queries.parent.mkdir()
    queries.write_text("text,category\nmy card is lost,lost_or_stolen_card\n")
    labels = tmp_path / "in" / "map.json"
    labels.write_text('{"agents": {"cards": ["lost_or_stolen_card"]}}')
    args = [str(queries) if a == "QUERIES" else a for a in args] + (["--labels", str(labels)] if args[0] == "route"
                                                                    else [])
    far = tmp_path / "nonexistent" / "dir" / "x.db"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["switchboard", *args, "--db", str(far)])
    with pytest.raises(SystemExit) as code:
        cli.main()
    err = capsys.readouterr().err
    assert code.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: invalid setting db (SWITCHBOARD_DB): the folder ") and str(far.parent) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # no nonexistent/dir, no home
