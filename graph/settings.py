"""Run settings: which model, where the databases live, budgets. Read from arguments or the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from graph.errors import ConfigError
from policies.loops import default_max_hops

__all__ = ["Settings", "home_dir"]


#: Numeric settings read from the environment: (variable, Settings field, type, what it must be).
_NUMERIC_ENV = (
    ("SWITCHBOARD_MAX_HOPS", "max_hops", int, "an integer"),
    ("SWITCHBOARD_MODEL_TIMEOUT", "model_timeout_s", float, "a number of seconds"),
    ("SWITCHBOARD_MODEL_RETRIES", "model_retries", int, "an integer"),
)


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
        tool_timeout_s: a business tool call slower than this (seconds) counts as a failed attempt.
        model_timeout_s / model_retries: for the OpenAI-compatible client: seconds per request attempt, and retries
            after the first attempt (429, 5xx, timeouts, connection errors; the ``openai`` client's backoff).
        routing: how triage decides: ``"structured"`` (one ``route_to_agent`` call carrying a RouteDecision),
            ``"tools"`` (``transfer_to_<agent>`` calls, as the offline model does) or ``"auto"`` (structured for
            langchain-openai models, tools otherwise).
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
    tool_timeout_s: float = 5.0
    model_timeout_s: float = 30.0
    model_retries: int = 2
    routing: str = "auto"
    multi_handoff: str = "first"
    max_experts: int = 3
    expert_timeout_s: float = 30.0
    on_expert_failure: str = "continue"

    @property
    def recursion_limit(self) -> int:
        """LangGraph superstep limit for one turn, derived so the policies always stop a run first: entry,
        ``max_hops`` + 1 agent visits, fallback, the 4 steps of the approval flow, a supervisor fan-out and merge,
        doubled for margin. A GraphRecursionError therefore means a bug, never a misbehaving model."""
        return 2 * (self.max_hops + 10)

    @classmethod
    def from_env(cls, **overrides) -> "Settings":
        """Settings from ``SWITCHBOARD_MODEL``, ``SWITCHBOARD_DB``, ``SWITCHBOARD_MAX_HOPS``,
        ``SWITCHBOARD_MODEL_TIMEOUT`` (seconds), ``SWITCHBOARD_MODEL_RETRIES``, ``SWITCHBOARD_ROUTING`` then
        ``overrides`` (None values ignored). Raises ConfigError on a non-integer budget, a timeout <= 0, negative
        retries or an unknown routing mode."""
        s = cls()
        env: dict = {}
        if os.environ.get("SWITCHBOARD_MODEL"):
            env["model"] = os.environ["SWITCHBOARD_MODEL"]
        if os.environ.get("SWITCHBOARD_DB"):
            env["db"] = Path(os.environ["SWITCHBOARD_DB"])
        for var, key, kind, what in _NUMERIC_ENV:
            raw = os.environ.get(var)
            if raw:
                try:
                    env[key] = kind(raw)
                except ValueError as exc:
                    raise ConfigError(f"{var} must be {what}, got {raw!r}") from exc
        if os.environ.get("SWITCHBOARD_ROUTING"):
            env["routing"] = os.environ["SWITCHBOARD_ROUTING"].strip().lower()
        env.update({k: v for k, v in overrides.items() if v is not None})
        s = replace(s, **env)
        if not 1 <= s.max_hops <= 100:
            raise ConfigError(f"max_hops must be between 1 and 100, got {s.max_hops}")
        if s.max_tool_rounds < 1 or s.tool_retries < 1:
            raise ConfigError("max_tool_rounds and tool_retries must be >= 1")
        if not s.model_timeout_s > 0:
            raise ConfigError(f"the model timeout must be > 0 seconds, got {s.model_timeout_s}")
        if s.model_retries < 0:
            raise ConfigError(f"model retries must be >= 0, got {s.model_retries}")
        if s.routing not in ("auto", "structured", "tools"):
            raise ConfigError(f"routing must be auto, structured or tools, got {s.routing!r}")
        if s.multi_handoff not in ("first", "supervisor"):
            raise ConfigError(f"multi_handoff must be 'first' or 'supervisor', got {s.multi_handoff!r}")
        if s.on_expert_failure not in ("continue", "fail"):
            raise ConfigError(f"on_expert_failure must be 'continue' or 'fail', got {s.on_expert_failure!r}")
        if s.max_experts < 1 or s.expert_timeout_s <= 0:
            raise ConfigError(f"max_experts must be >= 1 and expert_timeout_s > 0, got {s.max_experts} and {s.expert_timeout_s}")
        return s
