"""The desk's knowledge: what each specialist does for each kind of request it owns (``nodes/data/desk_knowledge.json``).

One :class:`DeskIntent` per request kind the desk serves (the 77 BANKING77 intents and the 20 desk intents of CLINC150,
``../shared/data``; intents that mean the same in both datasets share one entry and list the other name in
``labels``). Each names its owning agent, its behaviour (``kind``: ``tool`` = call a business tool, then add the
answer; ``knowledge`` = answer from the handbook text; ``freeze`` = freeze the card at once, a safety action;
``operator`` = open a request only an operator can carry out) and the project's own keyword patterns that recognise
it. The offline model (``nodes.embedded.playbook``) uses it; a real LLM reads the same answers through ``lookup_policy``
topics. Source of every number: the fictional handbook named in the file's ``source`` (the same figures as
``nodes.tools.POLICY_KB``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["DeskIntent", "DeskKnowledge", "KNOWLEDGE_PATH", "INTENT_KINDS", "SOCIAL_TOPICS", "SOCIAL_CONFIDENCE",
           "SOCIAL_ALIASES", "load_knowledge", "normalise_label", "social_topic", "social_answers"]

KNOWLEDGE_PATH = Path(__file__).resolve().parent.parent / "data" / "desk_knowledge.json"
#: The behaviour kinds of an intent (see the module doc).
INTENT_KINDS: tuple[str, ...] = ("tool", "knowledge", "freeze", "operator")

#: The router's no-specialist topics that are social moves (a greeting, thanks, a goodbye): whoever holds the
#: conversation answers them with the desk's ``conversational`` answer; they are never a clarifying round without
#: progress.
#: ``conversational`` is the router's topic for questions about the desk itself ("are you a bot?", "am I talking to a
#: person?"): the holder answers those too instead of a business answer.
#: ``capabilities`` answers "what can you do?" with what the desk helps with (never a clarify
#: prompt).
SOCIAL_TOPICS = frozenset({"greeting", "thanks", "goodbye", "conversational", "capabilities"})
#: Minimum router probability for reading a message as social (the shipped router gives 0.71-0.89 to plain greetings,
#: thanks and goodbyes, ``tests/scenarios/test_conversation_routing.py``).
SOCIAL_CONFIDENCE = 0.5
#: CLINC150's conversational categories (``nodes/data/router-default.npz`` is fitted on them as
#: ``conversational:<category>``, ``../shared/data/clinc150/desk_map.json``) that are a greeting, thanks, goodbye or a
#: question about the assistant itself, as our social topic; the rest (yes/no/cancel/repeat: replies; device settings
#: such as change_volume) are not social.
SOCIAL_ALIASES: dict[str, str] = {
    "greeting": "greeting", "thank_you": "thanks", "goodbye": "goodbye",
    **dict.fromkeys(("are_you_a_bot", "who_made_you", "who_do_you_work_for", "what_is_your_name", "how_old_are_you",
                     "where_are_you_from"), "conversational"),
    "what_can_i_ask_you": "capabilities",
}


#: A farewell inside a thanks ("thanks, bye", "thank you, that's all"): the goodbye answers it, not "anything else?".


def social_topic(route: Any, text: str | None = None) -> str | None:
    """The social topic (one of :data:`SOCIAL_TOPICS`) of a router result (``agent``, ``intent``, ``confidence``), or
    None: the router gave no specialist (``other``) with at least :data:`SOCIAL_CONFIDENCE` and a social topic (a
    trained router's merged labels ``desk_other:<topic>`` count by their topic; CLINC150's ``conversational:<category>``
    labels by :data:`SOCIAL_ALIASES`). With the message ``text``, its dialogue act
    (``nodes.embedded.understanding.acts``) refines a thanks or a goodbye: a thanks that also says goodbye ("thanks,
    bye", "thanks, that's all") is ``goodbye``, and a vague call for help the router reads as a thanks ("help") is
    ``capabilities`` (what the desk can do)."""
    if route is None or getattr(route, "agent", None) != "other":
        return None
    if float(getattr(route, "confidence", 0.0) or 0.0) < SOCIAL_CONFIDENCE:
        return None
    label = str(getattr(route, "intent", "") or "")
    topic: str | None = label.rsplit(":", 1)[-1]
    if label.startswith("conversational:"):
        topic = SOCIAL_ALIASES.get(topic or "")
    elif topic not in SOCIAL_TOPICS:
        topic = None
    if topic in ("thanks", "goodbye") and text and text.strip():
        from nodes.embedded.understanding.reading import understand

        act = understand(text).act.act
        return {"bye": "goodbye", "help": "capabilities"}.get(act, topic)
    return topic


def social_answers() -> frozenset[str]:
    """The desk's answers to a greeting, thanks or goodbye (the ``conversational`` texts of :data:`SOCIAL_TOPICS`)."""
    answers = load_knowledge().conversational
    return frozenset(answers[t] for t in SOCIAL_TOPICS if t in answers)


def normalise_label(label: str) -> str:
    """A dataset label as an intent key: lower case, ``?`` dropped (``"Refund_not_showing_up"`` ->
    ``"refund_not_showing_up"``, ``"reverted_card_payment?"`` -> ``"reverted_card_payment"``)."""
    return label.strip().lower().rstrip("?")


@dataclass(frozen=True)
class DeskIntent:
    """One request kind of the desk.

    key: intent key (snake case); agent: the specialist that owns it; kind: one of :data:`INTENT_KINDS`;
    tool: the business tool the agent calls (None for ``knowledge``); args: that tool's fixed arguments;
    answer: customer-facing text added after the tool's result (or the whole answer for ``knowledge``);
    patterns: compiled lower-case regular expressions that recognise it; labels: other dataset names of it."""

    key: str
    agent: str
    kind: str
    answer: str
    tool: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    patterns: tuple[re.Pattern[str], ...] = ()
    labels: tuple[str, ...] = ()

    def score(self, text: str) -> int:
        """How many of the patterns match the lower-cased ``text`` (0 = not this intent)."""
        return sum(1 for p in self.patterns if p.search(text))


@dataclass(frozen=True)
class DeskKnowledge:
    """The parsed knowledge file: ``intents`` by key (file order), ``policy_topics`` (key -> {title, text,
    keywords}), ``conversational`` answers (router topic -> text), ``delivery_days`` (country or ``EEA`` /
    ``default`` -> (min, max) business days for a new card) and ``regions`` (a region the handbook's rules name,
    ``UK`` / ``SEPA`` / ``international`` -> the lower-case place names a customer may use for it)."""

    source: str
    intents: dict[str, DeskIntent]
    policy_topics: dict[str, dict[str, Any]]
    conversational: dict[str, str]
    delivery_days: dict[str, tuple[int, int]]
    regions: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def region_of(self, place: str) -> str | None:
        """The region (a key of ``regions``) of a place a customer names ("Switzerland" -> ``"SEPA"``, "the UK" ->
        ``"UK"``, "Japan" -> ``"international"``), compared in lower case; None for a place the file does not list."""
        name = " ".join((place or "").lower().split())
        return next((region for region, names in self.regions.items() if name in names), None)

    def for_agent(self, agent: str) -> list[DeskIntent]:
        """The intents ``agent`` owns, in file order."""
        return [i for i in self.intents.values() if i.agent == agent]

    def by_label(self, label: str) -> DeskIntent | None:
        """The intent a dataset label names (its key or one of its ``labels``, compared after
        :func:`normalise_label`), or None."""
        name = normalise_label(label)
        if name in self.intents:
            return self.intents[name]
        return next((i for i in self.intents.values() if name in {normalise_label(x) for x in i.labels}), None)

    def resolve(self, agent: str, text: str, hint: str | None = None) -> DeskIntent | None:
        """The intent of ``agent`` that ``text`` asks about: the most pattern hits (ties: file order); with no
        hit, ``hint`` (e.g. the router's fine label) when it names an intent of ``agent``; else None."""
        lowered = (text or "").lower()
        best, best_score = None, 0
        for intent in self.for_agent(agent):
            score = intent.score(lowered)
            if score > best_score:
                best, best_score = intent, score
        if best is not None:
            return best
        hinted = self.by_label(hint) if hint else None
        return hinted if hinted is not None and hinted.agent == agent else None


    def owner_by_patterns(self, agent: str, text: str) -> str | None:
        """Another agent whose intents' patterns match ``text`` better than any intent of ``agent`` (strictly more
        hits), or None: a second opinion for a request the router sent to the wrong specialist."""
        lowered = (text or "").lower()
        own = max((i.score(lowered) for i in self.for_agent(agent)), default=0)
        best_agent, best = None, own
        for intent in self.intents.values():
            if intent.agent != agent and (score := intent.score(lowered)) > best:
                best_agent, best = intent.agent, score
        return best_agent


def _parse(raw: dict[str, Any]) -> DeskKnowledge:
    intents: dict[str, DeskIntent] = {}
    for key, d in raw["intents"].items():
        if d["kind"] not in INTENT_KINDS:
            raise ValueError(f"intent {key}: unknown kind {d['kind']!r}")
        intents[key] = DeskIntent(key=key, agent=d["agent"], kind=d["kind"], answer=d.get("answer", ""),
                                  tool=d.get("tool"), args=dict(d.get("args") or {}),
                                  patterns=tuple(re.compile(p) for p in d.get("patterns", ())),
                                  labels=tuple(d.get("labels", ())))
    days = {k: (int(v[0]), int(v[1])) for k, v in raw.get("card_delivery_business_days", {}).items()}
    regions = {k: tuple(v) for k, v in raw.get("regions", {}).items() if not k.startswith("_")}
    return DeskKnowledge(source=raw.get("source", ""), intents=intents, policy_topics=dict(raw.get("policy_topics", {})),
                         conversational=dict(raw.get("conversational", {})), delivery_days=days, regions=regions)


@lru_cache(maxsize=4)
def load_knowledge(path: Path = KNOWLEDGE_PATH) -> DeskKnowledge:
    """Read and parse the knowledge file (cached per path). Raises ``OSError`` / ``ValueError`` (bad JSON, unknown
    kind, bad pattern) — the shipped file is checked by ``tests/nodes/test_intents.py``."""
    with open(path, encoding="utf-8") as fh:
        return _parse(json.load(fh))
