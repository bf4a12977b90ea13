"""Storage faults through the real CLI, counted: ``python -m tests.storage_faults`` prints one line per scenario
(exit code, traceback or not, the stderr's last line) and the totals.

Each scenario builds a fresh ``SWITCHBOARD_HOME`` (a refund paused for approval on thread ``r1``, an approver ``ann``),
damages it, and runs one CLI command in a subprocess:

* ``business.db`` / ``switchboard.db`` overwritten with garbage (corrupt) or cut to half its size (truncated);
* a read-only home (mounted read-only in a private mount namespace with ``unshare -m``; needs root, which the
  test machine is — file modes alone would not stop root);
* disk full: ``ulimit -f`` in the subprocess's shell, so writes past the limit fail (EFBIG);
* ``business.db`` deleted between the pause and the resume.

Used by ``tests/checkpoints/test_storage_faults.py``; the figures of the issue note come from running this module.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable

__all__ = ["Outcome", "SCENARIOS", "prepare_home", "run_scenario", "main"]


@dataclass(frozen=True)
class Outcome:
    """One scenario's result: ``name``, the command's exit ``code``, whether stderr holds a Python ``traceback``, the
    ``stderr`` text, and whether the business store was re-created (``reseeded``: a fresh demo store appeared where the
    damaged or deleted one was)."""

    name: str
    code: int
    traceback: bool
    stderr: str
    reseeded: bool = False

    @property
    def last_line(self) -> str:
        """The last non-empty stderr line ("" when none)."""
        lines = [x for x in self.stderr.strip().splitlines() if x.strip()]
        return lines[-1] if lines else ""


def _cli(home: Path, args: list[str], *, prefix: str = "", read_only: bool = False, timeout: float = 180
         ) -> subprocess.CompletedProcess:
    env = {**os.environ, "SWITCHBOARD_HOME": str(home), "PYTHONPATH": str(REPO)}
    cmd = f"{prefix}exec {shlex.quote(PY)} -m graph.app.cli " + " ".join(shlex.quote(a) for a in args)
    argv = ["bash", "-c", cmd]
    if read_only:  # a read-only file system (EROFS) over the home, in a private mount namespace
        h = shlex.quote(str(home))
        argv = ["unshare", "-m", "bash", "-c", f"mount --bind {h} {h} && mount -o remount,bind,ro {h} && {cmd}"]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)


def prepare_home(home: Path) -> None:
    """A home with thread ``r1`` paused on a £23.80 refund and approver ``ann`` registered."""
    home.mkdir(parents=True, exist_ok=True)
    steps = [["operators", "add", "boss", "--role", "admin", "--tenant", "t_demo"],
             ["operators", "add", "ann", "--role", "approver", "--tenant", "t_demo", "--as", "boss"],
             ["chat", "I want a refund for tx_1001 please", "--thread", "r1"]]
    for args in steps:
        r = _cli(home, args)
        if r.returncode != 0:
            raise RuntimeError(f"setup step {args[0]} failed: {r.stderr.strip()[-300:]}")


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is not a database\n" * 200)
    for extra in (Path(f"{path}-wal"), Path(f"{path}-shm")):
        extra.unlink(missing_ok=True)


def _truncate(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(max(512, size // 2))
    for extra in (Path(f"{path}-wal"), Path(f"{path}-shm")):
        extra.unlink(missing_ok=True)


def _read_only(home: Path) -> None:
    """Nothing to damage: the command runs with the home mounted read-only (see ``_cli``)."""


#: (name, damage(home), command args, shell prefix, read-only home)
SCENARIOS: list[tuple[str, Callable[[Path], None], list[str], str, bool]] = [
    ("corrupt business.db: chat", lambda h: _garbage(h / "business.db"), ["chat", "hello", "--thread", "n1"], "", False),
    ("corrupt business.db: resume", lambda h: _garbage(h / "business.db"), ["resume", "r1", "--approve", "--as", "ann"],
     "", False),
    ("truncated business.db: pending", lambda h: _truncate(h / "business.db"), ["pending", "--as", "ann"], "", False),
    ("corrupt switchboard.db: chat", lambda h: _garbage(h / "switchboard.db"), ["chat", "hello", "--thread", "n1"], "",
     False),
    ("truncated switchboard.db: history", lambda h: _truncate(h / "switchboard.db"), ["history", "r1", "--as", "ann"],
     "", False),
    ("truncated switchboard.db: resume", lambda h: _truncate(h / "switchboard.db"),
     ["resume", "r1", "--approve", "--as", "ann"], "", False),
    ("read-only home: chat", _read_only, ["chat", "hello", "--thread", "n1"], "", True),
    ("read-only home: resume", _read_only, ["resume", "r1", "--approve", "--as", "ann"], "", True),
    ("disk full (ulimit -f): chat", lambda h: None, ["chat", "I was charged twice for my coffee", "--thread", "n2"],
     "ulimit -f 1; ", False),
    ("disk full (ulimit -f): resume", lambda h: None, ["resume", "r1", "--approve", "--as", "ann"], "ulimit -f 1; ",
     False),
    ("business.db deleted: resume", lambda h: (h / "business.db").unlink(), ["resume", "r1", "--approve", "--as", "ann"],
     "", False),
    ("business.db deleted: chat", lambda h: (h / "business.db").unlink(), ["chat", "hello", "--thread", "r1"], "", False),
    ("business.db deleted: pending", lambda h: (h / "business.db").unlink(), ["pending", "--as", "ann"], "", False),
    ("business.db deleted: operators add", lambda h: (h / "business.db").unlink(),
     ["operators", "add", "zed", "--role", "admin", "--tenant", "t_demo"], "", False),
    ("corrupt business.db: tasks --stuck", lambda h: _garbage(h / "business.db"), ["tasks", "--stuck", "--as", "ann"],
     "", False),
    ("corrupt switchboard.db: threads", lambda h: _garbage(h / "switchboard.db"), ["threads", "--as", "ann"], "", False),
    ("read-only home: history", _read_only, ["history", "r1", "--as", "ann"], "", True),
    ("read-only home: recover", _read_only, ["recover", "--as", "ann"], "", True),
    ("corrupt switchboard.db: trace", lambda h: _garbage(h / "switchboard.db"), ["trace", "r1", "--as", "ann"], "",
     False),
    ("truncated switchboard.db: stats", lambda h: _truncate(h / "switchboard.db"), ["stats", "--as", "ann"], "", False),
    ("read-only home: trace", _read_only, ["trace", "r1", "--as", "ann"], "", True),
    ("switchboard.db emptied: chat", lambda h: (h / "switchboard.db").write_bytes(b""),
     ["chat", "hello", "--thread", "r1"], "", False),
    ("switchboard.db deleted: resume", lambda h: (h / "switchboard.db").unlink(),
     ["resume", "r1", "--approve", "--as", "ann"], "", False),
    ("corrupt business.db: operators list", lambda h: _garbage(h / "business.db"), ["operators", "list", "--as", "ann"],
     "", False),
    ("disk full (ulimit -f): operators add", lambda h: None,
     ["operators", "add", "cy", "--role", "agent", "--tenant", "t_demo", "--as", "boss"], "ulimit -f 1; ", False),
]


def run_scenario(base: Path, name: str, damage: Callable[[Path], None], args: list[str], prefix: str,
                 read_only: bool) -> Outcome:
    """Prepare a home under ``base`` (a copy of ``base/template`` when it exists), damage it, run the command."""
    home = base / name.replace(" ", "_").replace(":", "").replace("(", "").replace(")", "").replace("/", "_")
    template = base / "template"
    if template.exists():
        shutil.copytree(template, home)
    else:
        prepare_home(home)
    damage(home)
    business = home / "business.db"
    header = business.read_bytes()[:16] if business.exists() else b""
    r = _cli(home, args, prefix=prefix, read_only=read_only)
    sqlite = b"SQLite format 3\x00"
    reseeded = header != sqlite and business.exists() and business.read_bytes()[:16] == sqlite
    return Outcome(name, r.returncode, "Traceback (most recent call last)" in r.stderr, r.stderr, reseeded)


def run_all(base: Path | None = None) -> list[Outcome]:
    """Every scenario of :data:`SCENARIOS`, in order (a fresh home each, copied from one prepared template)."""
    base = base or Path(tempfile.mkdtemp(prefix="sb_faults_"))
    prepare_home(base / "template")
    return [run_scenario(base, *s) for s in SCENARIOS]


def main() -> int:
    """Print one line per scenario and the totals; exit 0."""
    outcomes = run_all()
    for o in outcomes:
        flag = "TRACEBACK" if o.traceback else "ok"
        print(f"{o.name:38} exit={o.code} {flag:9} reseeded={o.reseeded} | {o.last_line[:150]}")
    print(f"scenarios={len(outcomes)} tracebacks={sum(o.traceback for o in outcomes)} "
          f"exit2={sum(o.code == 2 for o in outcomes)} reseeded={sum(o.reseeded for o in outcomes)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
