"""Run settings: which model, where the databases live, budgets. Read from arguments or the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from graph.errors import ConfigError
from policies.loops import default_max_hops

__all__ = ["Settings", "home_dir"]


def home_dir() -> Path:
    """``$SWITCHBOARD_HOME`` or ``./.switchboard``: where databases and fitted models live."""
    return Path(os.environ.get("SWITCHBOARD_HOME", ".switchboard"))


@dataclass(frozen=True)
class Settings:
    """Knobs of one graph build.

    Attributes:
        model: ``"offline"`` (default, embedded) or ``"openai:<model>"`` (via langchain-openai).
        db: checkpoint database file (SQLite).
        business_db: business database file (customers, cards, transactions, refunds, tasks).
        router_path: a router trained with ``train-router``; None = the trained one if present, else the default.
        max_hops: handoffs allowed per turn (default: longest legal path + 1, see ``policies.loops``).
        max_tool_rounds: model calls one agent may make in one visit before fallback.
        tool_retries: attempts per failing business tool call (exponential backoff from ``tool_backoff_s``).
        tool_backoff_s: first backoff, seconds.
        model_timeout_s / model_retries: for the OpenAI-compatible client.
        multi_handoff: several handoffs in one model message: ``"first"`` (the first legal one wins, the
            others are answered "not executed") or ``"supervisor"`` (from triage: the set becomes a supervisor
            fan-out). See ``policies.handoff.arbitrate``.
        max_experts: sub-tasks one supervisor fan-out may run in parallel.
        expert_timeout_s: wall-clock seconds one expert consulted as a tool may take; then it counts as failed.
        on_expert_failure: ``"continue"`` (answer with the gap stated) or ``"fail"`` (the whole request goes to
            fallback) when an expert raises or times out. See ``policies.merge``.
    """

    model: str = "offline"
    db: Path = field(default_factory=lambda: home_dir() / "switchboard.db")
    business_db: Path = field(default_factory=lambda: home_dir() / "business.db")
    router_path: Path | None = None
    max_hops: int = field(default_factory=default_max_hops)
    max_tool_rounds: int = 4
    tool_retries: int = 3
    tool_backoff_s: float = 0.05
    model_timeout_s: float = 30.0
    model_retries: int = 2
    multi_handoff: str = "first"
    max_experts: int = 3
    expert_timeout_s: float = 30.0
    on_expert_failure: str = "continue"

    @classmethod
    def from_env(cls, **overrides) -> "Settings":
        """Settings from ``SWITCHBOARD_MODEL``, ``SWITCHBOARD_DB``, ``SWITCHBOARD_MAX_HOPS`` then ``overrides``
        (None values ignored). Raises ConfigError on a non-integer budget."""
        s = cls()
        env: dict = {}
        if os.environ.get("SWITCHBOARD_MODEL"):
            env["model"] = os.environ["SWITCHBOARD_MODEL"]
        if os.environ.get("SWITCHBOARD_DB"):
            env["db"] = Path(os.environ["SWITCHBOARD_DB"])
        if os.environ.get("SWITCHBOARD_MAX_HOPS"):
            try:
                env["max_hops"] = int(os.environ["SWITCHBOARD_MAX_HOPS"])
            except ValueError as exc:
                raise ConfigError(f"SWITCHBOARD_MAX_HOPS must be an integer, got {os.environ['SWITCHBOARD_MAX_HOPS']!r}") from exc
        env.update({k: v for k, v in overrides.items() if v is not None})
        s = replace(s, **env)
        if s.max_hops < 1:
            raise ConfigError(f"max_hops must be >= 1, got {s.max_hops}")
        if s.multi_handoff not in ("first", "supervisor"):
            raise ConfigError(f"multi_handoff must be 'first' or 'supervisor', got {s.multi_handoff!r}")
        if s.on_expert_failure not in ("continue", "fail"):
            raise ConfigError(f"on_expert_failure must be 'continue' or 'fail', got {s.on_expert_failure!r}")
        if s.max_experts < 1 or s.expert_timeout_s <= 0:
            raise ConfigError(f"max_experts must be >= 1 and expert_timeout_s > 0, got {s.max_experts} and {s.expert_timeout_s}")
        return s
