"""The examples are runnable and use only the public API."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.subprocess]

REPO = Path(__file__).resolve().parents[2]


def test_demo_example_runs(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "SWITCHBOARD_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    r = subprocess.run([sys.executable, str(REPO / "examples" / "demo_double_charge.py")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "triage → billing" in r.stdout and "billing → refunds" in r.stdout and "tx_1008" in r.stdout
    # the approval story: the customer's own approval is refused, a registered approver's is recorded and pays
    assert "may not approve" in r.stdout and "recorded decision: approve by operator:ann" in r.stdout
