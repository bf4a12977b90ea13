"""bench/long_thread.py runs with tiny sizes: figures for its marks, the transcript read back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.subprocess
def test_the_long_thread_bench_runs_tiny(tmp_path):
    out = tmp_path / "figures.json"
    run = subprocess.run([sys.executable, "bench/long_thread.py", "--turns", "12", "--window", "4", "--json", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    fig = json.loads(out.read_text())
    assert fig["transcript_recovered"] and list(fig["marks"]) == ["10"] and fig["marks"]["10"]["median_ms"] > 0
    assert fig["bytes_per_turn"] > 0 and "CPU ms/turn" in run.stdout
