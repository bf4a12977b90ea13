"""``--db`` / ``SWITCHBOARD_DB`` / ``SWITCHBOARD_BUSINESS_DB`` with an unsupported URL scheme is a one-line
configuration error (exit 2), never a relative path: ``mysql://x`` once created a directory ``./mysql:``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoints import open_checkpointer
from graph.errors import ConfigError
from graph.settings import Settings, check_database_target

REPO = Path(__file__).resolve().parents[1]


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
    r = subprocess.run([sys.executable, "-m", "graph.cli", "chat", "hi", "--db", "mysql://x"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env={**env, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: unsupported database URL 'mysql://x' (use a SQLite file path or postgresql://…)"], r.stderr
    assert list(tmp_path.iterdir()) == []
