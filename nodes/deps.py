"""What the nodes of one compiled graph share: model, message reader, business store, router, settings, edge table, event
log."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel

from checkpoints.event_log import EventLog
from graph.reading import MessageReader
from graph.settings import Settings
from policies.contracts import DEFAULT_CONTRACTS, AgentContract
from policies.edges import DEFAULT_EDGE_TABLE, SPECIALISTS, EdgeTable
from policies.history import DEFAULT_HISTORY
from policies.policy_set import PolicySet

__all__ = ["Deps"]


@dataclass
class Deps:
    """The dependencies of one compiled graph (built once by ``graph.builder.build_desk``).

    Attributes:
        model: the chat model every agent calls (``bind_tools`` per agent).
        reader: the message reader that goes with the model (``graph.reading.MessageReader``, supplied by the model
            factory ``nodes.models.make_reader``): the one reading of each turn's message, made by the entry node.
        store: the business store (``checkpoints.business.BusinessStore`` or a test double with the same methods).
        router: the intent router (``.route(text) -> Route``) for next-turn entry and the offline model.
        settings: budgets and paths.
        table: the edge table (legal handoffs).
        history: per-edge history policies (``policies.history``).
        available: specialists that can take turns now.
        sleep: the sleep used between tool retries (injectable for tests), seconds.
        events: the event log, or None for none.
        read_cache: last good result of each read-only tool call, per (customer, tool, args): the alternative path
            when a tool keeps failing (shared by the nodes of one compiled graph, in this process only).
        structured_routing: triage routes with the structured ``route_to_agent`` tool (a RouteDecision) instead of
            ``transfer_to_*``.
        contracts: what each agent needs on arrival (``policies.contracts``): a packet lacking it asks for it and is
            recorded as ``packet_incomplete``.
        policy: the rules' parameters when they differ from today's (``graph.builder.make_deps(policy=…)``); None:
            :attr:`policy_set` is today's, with ``table`` and ``settings.max_hops``.
    """

    model: BaseChatModel
    store: Any
    router: Any
    settings: Settings
    reader: MessageReader
    table: EdgeTable = DEFAULT_EDGE_TABLE
    history: Mapping = field(default_factory=lambda: dict(DEFAULT_HISTORY))
    available: frozenset[str] = frozenset(SPECIALISTS)
    sleep: Callable[[float], None] = time.sleep
    events: EventLog | None = None
    read_cache: dict = field(default_factory=dict)
    structured_routing: bool = False
    contracts: Mapping[str, AgentContract] = field(default_factory=lambda: dict(DEFAULT_CONTRACTS))
    policy: PolicySet | None = None

    @property
    def policy_set(self) -> PolicySet:
        """The parameters the nodes give the rules (edge table, handoff guards, risk rules, hop budget)."""
        if self.policy is not None:
            return self.policy
        return PolicySet(edges=self.table, max_hops=self.settings.max_hops)
