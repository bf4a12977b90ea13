"""Run settings: which model, where the stores live, budgets — validated on construction (pydantic-settings).

``Settings()`` reads the environment (``SWITCHBOARD_*``, see the field table below); keyword arguments win over the
environment; an invalid value raises :class:`graph.contracts.errors.ConfigError` with one line naming the setting. A contract
module: it imports nothing of the project above ``graph.contracts.errors``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from graph.contracts.errors import ConfigError

__all__ = ["Settings", "home_dir", "is_postgres", "check_database_target", "check_database_folder",
           "DEFAULT_MAX_HOPS"]

#: Default handoffs per turn: the longest legal simple path of the default edge table (triage → billing → refunds →
#: risk → human_approval → refund_execute → refunds: 6 hops) + 1. Source: ``policies.loops.default_max_hops()``; a
#: test keeps the two equal (this contract module may not import the policies that compute it).
DEFAULT_MAX_HOPS = 7


#: A URL's scheme (RFC 3986 §3.1) followed by ``://``; anything else in ``db`` / ``business_db`` is a file path.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: The ``user:password@`` part of a URL, hidden in messages.
_USERINFO = re.compile(r"(://[^/@:]*):[^/@]*@")


def check_database_target(value: str) -> str:
    """``value`` unchanged when it is a SQLite file path, ``memory``, ``sqlite://…``, or a PostgreSQL URL
    (``postgres://``, ``postgresql://``, ``postgresql+<driver>://``). Raises ConfigError (one line, the password
    hidden) for any other URL scheme (``mysql://x`` would otherwise be taken as a relative path and create a
    directory ``mysql:``)."""
    m = _SCHEME.match(value)
    if m is None or m.group(1).lower() == "sqlite" or is_postgres(value):
        return value
    shown = _USERINFO.sub(r"\1:***@", value)
    raise ConfigError(f"unsupported database URL {shown!r} (use a SQLite file path or postgresql://…)")


def check_database_folder(value: str, setting: str = "db") -> str:
    """``value`` unchanged unless it is a SQLite file (a path or ``sqlite:///path``) whose folder does not exist and
    lies outside :func:`home_dir`: then ConfigError, one line naming the folder and ``setting`` with its environment
    variable. The desk creates its home (and folders in it) on first use, nothing else: a mistyped ``--db
    /nonexistent/dir/x.db`` must not leave a directory tree behind. ``memory`` and PostgreSQL URLs pass."""
    if value == "memory" or is_postgres(value) or value.startswith("sqlite://") and not value.startswith("sqlite:///"):
        return value
    folder = Path(value.removeprefix("sqlite:///")).parent
    if folder.is_dir() or folder.resolve().is_relative_to(home_dir().resolve()):
        return value
    raise ConfigError(f"invalid setting {setting} ({_env_name(setting)}): the folder {folder} does not exist; create "
                      f"it first (only the home folder {home_dir()} is created for you)")


def home_dir() -> Path:
    """``$SWITCHBOARD_HOME`` or ``./.switchboard``: where databases, locks and trained routers live."""
    return Path(os.environ.get("SWITCHBOARD_HOME") or ".switchboard")


def is_postgres(target: object) -> bool:
    """True when ``target`` (a database path or URL) names a PostgreSQL server (``postgres://``, ``postgresql://``,
    ``postgresql+psycopg://``); False for a SQLite path, ``sqlite:///…``, ``memory`` or None."""
    return isinstance(target, str) and target.startswith(("postgres://", "postgresql://", "postgresql+"))


class Settings(BaseSettings):
    """Knobs of one graph build. Frozen; validated when constructed.

    Attributes (environment variable in brackets; every field is also settable as ``SWITCHBOARD_<FIELD>``):
        model: ``"offline"`` (default, embedded) or ``"openai:<model>"`` (via langchain-openai) [SWITCHBOARD_MODEL].
        db: checkpoint database (SQLite file path, or a ``postgresql://`` URL) [SWITCHBOARD_DB];
            default ``$SWITCHBOARD_HOME/switchboard.db``. A SQLite file outside the home needs an existing folder
            (:func:`check_database_folder`; the same for ``business_db``).
        business_db: business database (customers, cards, transactions, refunds, tasks) [SWITCHBOARD_BUSINESS_DB];
            default ``$SWITCHBOARD_HOME/business.db``, or the same database as ``db`` when that is PostgreSQL (one
            ``--db postgresql://…`` puts every store in one database; see :meth:`is_postgres`).
        router_path: a router trained with ``train-router``; None = the trained one if present, else the shipped default.
        max_hops: handoffs allowed per turn, 1..100 (default :data:`DEFAULT_MAX_HOPS`) [SWITCHBOARD_MAX_HOPS].
        max_tool_rounds: model calls one agent may make in one visit before fallback (>= 1).
        tool_retries: attempts per failing business tool call, >= 1 (exponential backoff from ``tool_backoff_s``).
        tool_backoff_s: first backoff, seconds (>= 0).
        tool_timeout_s: a business tool call slower than this (seconds, > 0) counts as a failed attempt.
        model_timeout_s: seconds per request attempt of the OpenAI-compatible client, > 0 [SWITCHBOARD_MODEL_TIMEOUT].
        model_retries: retries after the first attempt (429, 5xx, timeouts, connection errors; the ``openai``
            client's backoff), >= 0 [SWITCHBOARD_MODEL_RETRIES].
        routing: how triage decides: ``"structured"`` (one ``route_to_agent`` call carrying a RouteDecision),
            ``"tools"`` (``transfer_to_<agent>`` calls, as the offline model does) or ``"auto"`` (structured for
            langchain-openai models, tools otherwise) [SWITCHBOARD_ROUTING].
        multi_handoff: several handoffs in one model message: ``"first"`` (the first legal one wins, the
            others are answered "not executed") or ``"supervisor"`` (from triage: the set becomes a supervisor
            fan-out). See ``policies.handoff.arbitrate``.
        max_experts: experts one supervisor fan-out may call in parallel (agent as tool), >= 1.
        expert_timeout_s: wall-clock seconds one expert call may take (> 0); then it counts as failed.
        on_expert_failure: ``"continue"`` (answer with the gap stated) or ``"fail"`` (the whole request goes to
            fallback) when an expert raises or times out. See ``policies.merge``.
        approval_deadline_h: hours a refund may wait for a human decision (> 0, default 72); after that
            ``switchboard pending --overdue`` lists it and ``switchboard recover --expire`` ends it, nothing paid
            [SWITCHBOARD_APPROVAL_DEADLINE_H].
        max_input_tokens: the budget of every model call's input, estimated tokens (>= 500, default 6,000): older
            turns are trimmed (``policies.history.bound_messages``), the packet carries what they
            established [SWITCHBOARD_MAX_INPUT_TOKENS].
        otel: OpenTelemetry spans of every run (``nodes.tracing``): ``"off"`` (default: nothing is recorded or sent),
            ``"console"`` (each span as JSON on stderr) or ``"otlp"`` (to the OTLP endpoint the standard
            ``OTEL_EXPORTER_OTLP_*`` variables name) [SWITCHBOARD_OTEL].

    Raises:
        ConfigError: a value of the wrong type or out of range, from a keyword or the environment.
    """

    model_config = SettingsConfigDict(env_prefix="SWITCHBOARD_", frozen=True, extra="ignore", env_ignore_empty=True,
                                      populate_by_name=True)

    model: str = Field(default="offline", validation_alias=AliasChoices("model", "SWITCHBOARD_MODEL"))
    db: str = Field(default_factory=lambda: str(home_dir() / "switchboard.db"),
                    validation_alias=AliasChoices("db", "SWITCHBOARD_DB"))
    business_db: str = Field(default_factory=lambda data: data["db"] if is_postgres(data.get("db"))
                             else str(home_dir() / "business.db"))
    router_path: Path | None = None
    max_hops: int = Field(default=DEFAULT_MAX_HOPS, ge=1, le=100,
                          validation_alias=AliasChoices("max_hops", "SWITCHBOARD_MAX_HOPS"))
    max_tool_rounds: int = Field(default=4, ge=1)
    tool_retries: int = Field(default=3, ge=1)
    tool_backoff_s: float = Field(default=0.05, ge=0, allow_inf_nan=False)
    tool_timeout_s: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    model_timeout_s: float = Field(default=30.0, gt=0, allow_inf_nan=False,
                                   validation_alias=AliasChoices("model_timeout_s", "SWITCHBOARD_MODEL_TIMEOUT"))
    model_retries: int = Field(default=2, ge=0,
                               validation_alias=AliasChoices("model_retries", "SWITCHBOARD_MODEL_RETRIES"))
    routing: Literal["auto", "structured", "tools"] = Field(
        default="auto", validation_alias=AliasChoices("routing", "SWITCHBOARD_ROUTING"))
    multi_handoff: Literal["first", "supervisor"] = "first"
    max_experts: int = Field(default=3, ge=1)
    expert_timeout_s: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    on_expert_failure: Literal["continue", "fail"] = "continue"
    max_input_tokens: int = Field(default=6000, ge=500,
                                  validation_alias=AliasChoices("max_input_tokens", "SWITCHBOARD_MAX_INPUT_TOKENS"))
    approval_deadline_h: float = Field(default=72.0, gt=0, allow_inf_nan=False,
                                       validation_alias=AliasChoices("approval_deadline_h",
                                                                     "SWITCHBOARD_APPROVAL_DEADLINE_H"))
    otel: Literal["off", "console", "otlp"] = Field(default="off", validation_alias=AliasChoices("otel", "SWITCHBOARD_OTEL"))

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigError(_one_line(exc)) from None

    @field_validator("db", "business_db", mode="before")
    @classmethod
    def _path_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, Path) else check_database_target(v) if isinstance(v, str) else v

    @field_validator("db", "business_db")
    @classmethod
    def _folder_exists(cls, v: str, info: ValidationInfo) -> str:
        return check_database_folder(v, str(info.field_name))

    @field_validator("routing", "otel", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v

    @property
    def recursion_limit(self) -> int:
        """LangGraph superstep limit for one turn, derived so the policies always stop a run first: entry,
        ``max_hops`` + 1 agent visits, fallback, the 4 steps of the approval flow, a supervisor fan-out and merge,
        doubled for margin. A GraphRecursionError therefore means a bug, never a misbehaving model. It is a floor:
        the compiled graph raises a caller's smaller limit to it (``graph.builder.DeskGraph``), and the servers put it
        in place of a client's (``graph.service.auth.server_run_config``)."""
        return 2 * (self.max_hops + 10)

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Settings from the environment, then ``overrides`` (None values ignored, so CLI options left unset fall
        through to the environment). Raises ConfigError on an invalid value."""
        return cls(**{k: v for k, v in overrides.items() if v is not None})

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied and validated (ConfigError on an invalid value)."""
        return type(self)(**(self.model_dump() | changes))


def _env_name(field: str) -> str:
    """The environment variable of Settings field ``field`` (its ``SWITCHBOARD_*`` alias, else the prefixed name)."""
    info = Settings.model_fields.get(field)
    alias = getattr(info, "validation_alias", None) if info is not None else None
    for choice in getattr(alias, "choices", ()):
        if isinstance(choice, str) and choice.startswith("SWITCHBOARD_"):
            return choice
    return f"SWITCHBOARD_{field.upper()}"


def _one_line(exc: ValidationError) -> str:
    """``"invalid setting max_hops (SWITCHBOARD_MAX_HOPS): Input should be greater than or equal to 1 (got 0)"`` for
    the first error, whether it came from a keyword or from the environment."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "settings"
    field = next((name for name in Settings.model_fields if _env_name(name) == where), where)
    return f"invalid setting {field} ({_env_name(field)}): {first.get('msg')} (got {first.get('input')!r})"
