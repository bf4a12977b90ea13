"""What the nodes of one compiled graph share: model, message reader, business store, router, settings, edge table, event
log.

The business store and the router are typed by what the nodes call (:class:`DeskStore`, :class:`IntentRouter`):
``checkpoints.business.BusinessStore`` and ``nodes.router``'s routers are the implementations; a test double
provides the same methods.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel

from checkpoints.business.records import (
    AuditEntry,
    Card,
    Customer,
    Decision,
    Operator,
    Refund,
    Task,
    ThreadOwner,
    Transaction,
    Transfer,
)
from checkpoints.event_log import EventLog
from graph.contracts.reading import MessageReader
from graph.contracts.settings import Settings
from policies.contracts import DEFAULT_CONTRACTS, AgentContract
from policies.edges import DEFAULT_EDGE_TABLE, SPECIALISTS, EdgeTable
from policies.history import DEFAULT_HISTORY
from policies.policy_set import PolicySet

__all__ = ["Deps", "DeskStore", "IntentRouter", "RouteLike"]


class DeskStore(Protocol):
    """The business store as the nodes use it: the methods of ``checkpoints.business.BusinessStore`` that the nodes
    call, with its signatures (its docstrings give what each does and raises: ``StorageUnavailable``,
    ``NotFoundError``, ``StaleVersionError``, …)."""

    def now(self) -> datetime:
        ...

    def get_customer(self, customer_id: str, tenant_id: str | None = None) -> Customer | None:
        ...

    def list_cards(self, customer_id: str) -> list[Card]:
        ...

    def get_card(self, customer_id: str, card_id: str) -> Card | None:
        ...

    def list_transactions(self, customer_id: str, limit: int = 20,
                          kind: str | None = None) -> list[Transaction]:
        ...

    def refund_credit(self, customer_id: str, refund_id: str) -> Transaction | None:
        ...

    def get_transaction(self, customer_id: str, tx_id: str) -> Transaction | None:
        ...

    def find_duplicate_charges(self, customer_id: str) -> list[tuple[Transaction, Transaction]]:
        ...

    def list_refunds(self, customer_id: str) -> list[Refund]:
        ...

    def get_refund(self, customer_id: str, refund_id: str) -> Refund | None:
        ...

    def load_refund(self, refund_id: str) -> Refund | None:
        ...

    def find_refund_by_key(self, idempotency_key: str) -> Refund | None:
        ...

    def refunds_for_transaction(self, customer_id: str, transaction_id: str) -> list[Refund]:
        ...

    def refunds_in_last_days(self, customer_id: str, days: int) -> list[Refund]:
        ...

    def list_transfers(self, customer_id: str) -> list[Transfer]:
        ...

    def get_transfer(self, customer_id: str, transfer_id: str) -> Transfer | None:
        ...

    def get_task(self, task_id: str) -> Task | None:
        ...

    def tasks_of_thread(self, thread_id: str) -> list[Task]:
        ...

    def list_decisions(self, task_id: str) -> list[Decision]:
        ...

    def refund_decision(self, refund_id: str) -> Decision | None:
        ...

    def get_decision(self, decision_id: str) -> Decision | None:
        ...

    def refund_eligibility(self, customer_id: str, transaction_id: str) -> tuple[bool, str]:
        ...

    def request_refund(self, customer_id: str, transaction_id: str, amount_minor: int, currency: str,
                       reason: str, idempotency_key: str | None) -> Refund:
        ...

    def execute_refund(self, refund_id: str, idempotency_key: str) -> dict[str, Any]:
        ...

    def freeze_card(self, customer_id: str, card_id: str, idempotency_key: str) -> dict[str, Any]:
        ...

    def unfreeze_card(self, customer_id: str, card_id: str, idempotency_key: str) -> dict[str, Any]:
        ...

    def open_service_request(self, customer_id: str, kind: str, idempotency_key: str) -> dict[str, Any]:
        ...

    def cancel_service_request(self, customer_id: str, kind: str | None = None) -> dict[str, Any] | None:
        ...

    def create_task(self, task_id: str, thread_id: str, owner: str, refund_id: str | None = None) -> Task:
        ...

    def update_task(self, task_id: str, expected_version: int, *, owner: str | None = None,
                    owner_version: int | None = None, **fields: Any) -> Task:
        ...

    def record_approval_rule(self, task_id: str, approvals_required: int, deadline: str | None = None) -> Task:
        ...

    def decide_approval(self, task_id: str, decision_id: str, approver: str, decision: str,
                        note: str = "", refund_id: str | None = None,
                        required_approvals: int = 1) -> tuple[Decision, bool]:
        ...

    def cancel_orphan_refund(self, refund_id: str) -> Refund:
        ...

    def get_operator(self, name: str) -> Operator | None:
        ...

    def claim_thread_owner(self, thread_id: str, customer_id: str, tenant_id: str,
                           source: str = "") -> tuple[ThreadOwner, bool]:
        ...

    def thread_owner(self, thread_id: str) -> ThreadOwner | None:
        ...

    def record_audit(self, actor: str, action: str, target: str = "", outcome: str = "allowed",
                     detail: Mapping[str, Any] | None = None, key: str | None = None) -> AuditEntry:
        ...

    def audit_entries(self, *, key: str | None = None, action: str | None = None, actor: str | None = None,
                      limit: int = 100) -> list[AuditEntry]:
        ...


class RouteLike(Protocol):
    """One routing decision (``nodes.router.Route``)."""

    agent: str
    confidence: float
    scores: dict[str, float]
    intent: str | None


class IntentRouter(Protocol):
    """The intent router (``nodes.router.IntentRouter`` behind ``graph.builder.LazyRouter``)."""

    def route(self, text: str) -> RouteLike:
        """The routing decision for ``text`` (deterministic for a fitted router)."""


@dataclass
class Deps:
    """The dependencies of one compiled graph (built once by ``graph.builder.build_desk``).

    Attributes:
        model: the chat model every agent calls (``bind_tools`` per agent).
        reader: the message reader that goes with the model (``graph.contracts.reading.MessageReader``, supplied by the model
            factory ``nodes.models.make_reader``): the one reading of each turn's message, made by the entry node.
        store: the business store (:class:`DeskStore`: ``checkpoints.business.BusinessStore`` or a test double with the
            same methods).
        router: the intent router (:class:`IntentRouter`, ``.route(text) -> Route``) for next-turn entry and the
            offline model.
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
    store: DeskStore
    router: IntentRouter
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
