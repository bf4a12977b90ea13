"""The conversation suite format of ``switchboard eval``: a YAML (or JSON) file, validated by pydantic models.

A suite holds multi-turn conversations; each customer turn says what a person would call a right answer: the
answering agent (or a set of acceptable ones), the business effects the turn must have (none unless listed), effects
that must not happen, and facts the answer must mention. The format is documented in docs/eval.md; the project's
own suite ships as ``graph/suites/desk.yaml`` (``switchboard eval desk``).

:func:`load_suite` reads a file or a shipped suite's name and raises :class:`graph.contracts.errors.InputError` with one line
naming the file, the conversation and the field when the file is not a valid suite.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from graph.app.effects import EFFECT_KINDS
from graph.contracts.errors import InputError
from policies.edges import CLARIFY, FALLBACK, OUT_OF_SCOPE, SPECIALISTS, SUPERVISOR, TRIAGE

__all__ = ["Turn", "SuiteConversation", "Suite", "load_suite", "shipped_suites", "ANSWERING_AGENTS", "ANY", "SPLITS",
           "stratified_split"]

#: Every agent that can answer a turn (``TurnResult.agent``).
ANSWERING_AGENTS: tuple[str, ...] = (TRIAGE, *SPECIALISTS, CLARIFY, SUPERVISOR, FALLBACK, OUT_OF_SCOPE)
#: ``agent: any`` — the turn's answering agent is not judged.
ANY = "any"
#: The parts of a suite: ``dev`` to develop against, ``held`` kept aside and only measured.
SPLITS = ("dev", "held")

_STRICT = ConfigDict(extra="forbid", frozen=True)


def _as_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _check_effects(v: tuple[str, ...]) -> tuple[str, ...]:
    bad = [e for e in v if e.partition(":")[0] not in EFFECT_KINDS]
    if bad:
        raise ValueError(f"{bad[0]!r} is not an effect (one of {', '.join(EFFECT_KINDS)}, optionally ':target')")
    return v


class Turn(BaseModel):
    """One step of a conversation: a customer message (``say``) with its expectations, or an operator's decision
    (``decide``: approve/reject, ``by``: the operator) on the refund the thread waits for (not scored).

    Attributes:
        say: the customer's message.
        agent: the acceptable answering agents (one name, a list, or ``any``), from :data:`ANSWERING_AGENTS`.
        effects: the effects the turn must have, exactly (``kind`` or ``kind:target``, ``graph.app.effects.EFFECT_KINDS``);
            empty (the default): none.
        allow: effects that may happen without being required (a correction may or may not undo the earlier action).
        forbid: effects that must not happen on this turn (besides the conversation's ``forbid``).
        mention: substrings the answer must contain (case-insensitive), each of them.
        regex: a regular expression the answer must match (``re.search``, case-insensitive).
        decide / by: an operator's decision and who takes it.
        note: why the expectation is what it is (not used in scoring).
    """

    model_config = _STRICT

    say: str | None = Field(default=None, min_length=1)
    agent: tuple[str, ...] = ()
    effects: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    forbid: tuple[str, ...] = ()
    mention: tuple[str, ...] = ()
    regex: str | None = None
    decide: Literal["approve", "reject"] | None = None
    by: str = "ann"
    note: str = ""

    _lists = field_validator("agent", "effects", "allow", "forbid", "mention", mode="before")(_as_list)

    @field_validator("agent")
    @classmethod
    def _known_agents(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [a for a in v if a != ANY and a not in ANSWERING_AGENTS]
        if bad:
            raise ValueError(f"{bad[0]!r} is not an agent (one of {', '.join(ANSWERING_AGENTS)} or 'any')")
        return v

    _effects = field_validator("effects", "allow", "forbid")(_check_effects)

    @field_validator("regex")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return v

    @model_validator(mode="after")
    def _one_kind(self) -> Turn:
        if (self.say is None) == (self.decide is None):
            raise ValueError("a turn has either 'say' (a customer message) or 'decide' (an operator's decision)")
        if self.say is not None and not self.agent:
            raise ValueError("a customer turn needs 'agent' (an agent, a list of them, or 'any')")
        if self.decide is not None and (self.agent or self.effects or self.mention or self.regex):
            raise ValueError("a 'decide' step is not scored: no agent, effects, mention or regex")
        return self


class SuiteConversation(BaseModel):
    """One conversation: ``id`` (unique in the suite), ``category``, ``customer`` (a customer of the demo bank),
    ``split`` (``dev``/``held``), ``forbid`` (effects no turn may have) and ``turns`` (at least one customer
    message)."""

    model_config = _STRICT

    id: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]
    category: str = Field(min_length=1)
    customer: str = "c_ada"
    split: Literal["dev", "held"] = "dev"
    forbid: tuple[str, ...] = ()
    turns: tuple[Turn, ...] = Field(min_length=1)
    note: str = ""

    _lists = field_validator("forbid", mode="before")(_as_list)
    _effects = field_validator("forbid")(_check_effects)

    @model_validator(mode="after")
    def _a_message_first(self) -> SuiteConversation:
        if self.turns[0].say is None:
            raise ValueError("the first turn must be a customer message ('say')")
        return self

    @property
    def messages(self) -> int:
        """How many customer turns it has (decisions not counted)."""
        return sum(t.say is not None for t in self.turns)


class Suite(BaseModel):
    """A suite: ``name``, ``description``, ``categories`` (when given, every conversation's category must be one),
    ``operators`` (approvers added to the scratch store for ``decide`` steps), ``split`` (how the parts were drawn,
    recorded as written) and ``conversations``."""

    model_config = _STRICT

    # the name is part of the file name `--out` writes (eval-<name>-<time>.json): no folder separator, no "..", so it
    # never names a path outside the folder
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")
    description: str = ""
    categories: tuple[str, ...] = ()
    operators: tuple[str, ...] = ("ann", "ben")
    split: dict[str, Any] = Field(default_factory=dict)
    conversations: tuple[SuiteConversation, ...] = Field(min_length=1)

    def select(self, split: str = "all", category: str | None = None, limit: int | None = None) -> list[SuiteConversation]:
        """The conversations of ``split`` (``dev``, ``held`` or ``all``) and ``category``, the first ``limit``."""
        chosen = [c for c in self.conversations
                  if (split == "all" or c.split == split) and (category is None or c.category == category)]
        return chosen if limit is None else chosen[:limit]


def shipped_suites() -> dict[str, Path]:
    """The suites shipped with the package (``graph/suites/*.yaml``), by name."""
    folder = resources.files("graph") / "suites"
    return {Path(p.name).stem: Path(str(p)) for p in folder.iterdir() if p.name.endswith((".yaml", ".yml", ".json"))}


def _where(loc: tuple[Any, ...], raw: dict[str, Any]) -> str:
    """``conversation 'id' turns[2].agent`` (or the top-level field) for a pydantic error location."""
    parts = list(loc)
    head = ""
    if len(parts) >= 2 and parts[0] == "conversations" and isinstance(parts[1], int):
        convs = raw.get("conversations") or []
        cid = convs[parts[1]].get("id") if parts[1] < len(convs) and isinstance(convs[parts[1]], dict) else None
        head = f"conversation {cid!r}" if cid else f"conversation #{parts[1] + 1}"
        parts = parts[2:]
    field = ""
    for p in parts:
        field += f"[{p}]" if isinstance(p, int) else (f".{p}" if field else str(p))
    return " ".join(x for x in (head, field) if x) or "top level"


def _read(path: Path) -> dict[str, Any]:
    import json

    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the suite ({exc})") from None
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {first}") from None
    if not isinstance(raw, dict):
        raise InputError(f"{path}: a suite is a mapping with 'name' and 'conversations'")
    return raw


def load_suite(name_or_path: str | Path) -> tuple[Suite, Path]:
    """The suite in the file ``name_or_path``, or the shipped suite of that name (:func:`shipped_suites`), and its path.

    Raises:
        InputError: no such file or shipped suite; the file is not YAML/JSON; a field is wrong (one line: the file,
            the conversation and the field); two conversations share an id; a category is not in ``categories``.
    """
    path = Path(name_or_path)
    if not path.is_file():
        shipped = shipped_suites()
        if str(name_or_path) not in shipped:
            raise InputError(f"{name_or_path}: no such suite file, and no shipped suite of that name "
                             f"(shipped: {', '.join(sorted(shipped)) or 'none'})")
        path = shipped[str(name_or_path)]
    raw = _read(path)
    try:
        suite = Suite.model_validate(raw)
    except ValidationError as exc:
        e = exc.errors()[0]
        msg = str(e["msg"]).removeprefix("Value error, ")
        raise InputError(f"{path}: {_where(tuple(e['loc']), raw)}: {msg}") from None
    seen: set[str] = set()
    for c in suite.conversations:
        if c.id in seen:
            raise InputError(f"{path}: conversation {c.id!r} id: used twice")
        seen.add(c.id)
        if suite.categories and c.category not in suite.categories:
            raise InputError(f"{path}: conversation {c.id!r} category: {c.category!r} is not one of the suite's "
                             f"categories ({', '.join(suite.categories)})")
    return suite, path


def stratified_split(conversations: Sequence[SuiteConversation], seed: int, held_share: float = 1 / 3) -> dict[str, str]:
    """``{conversation id: "dev" | "held"}``: within each category, the ids in sorted order are shuffled with
    ``random.Random(f"{seed}:{category}")`` (string seeds are hashed with SHA-512, so the draw is the same on every
    machine and Python run) and the first ``round(n * held_share)`` are held aside. How the project's suite was
    split, once, before any tuning (its ``split`` header records the seed; a test checks the file against it)."""
    import random

    by: dict[str, list[str]] = {}
    for c in conversations:
        by.setdefault(c.category, []).append(c.id)
    out: dict[str, str] = {}
    for category, ids in by.items():
        order = sorted(ids)
        random.Random(f"{seed}:{category}").shuffle(order)
        held = round(len(order) * held_share)
        out.update({cid: "held" if i < held else "dev" for i, cid in enumerate(order)})
    return out
