"""The specialists' business tools: what each agent may read or do in the business database.

A tool is a :class:`ToolSpec`: a name, a description for the model, a pydantic schema of the
**model-visible** arguments only, the agent that owns it, whether it has a side effect, and a function
``fn(store, ctx, **args) -> dict``. Identity (customer, tenant, thread, task) comes from the run
context as a :class:`ToolContext`, never from model-written arguments: the schemas forbid extra fields,
so a model that adds ``customer_id`` gets a :class:`ToolArgumentError` (DESIGN.md, control-flow rule 4).

The graph executes tools itself through :func:`run_tool`; :func:`as_langchain_tool` gives LangChain a
schema to ``bind_tools`` with, nothing more.

Result convention: every tool returns a JSON-serialisable ``dict`` with ``"ok": True`` and its data,
or ``{"ok": False, "error": "<one line>"}`` for a business refusal (not the customer's transaction, not
eligible, ...). Money in results: ``amount_minor`` (int, minor units) + ``currency`` (ISO 4217) +
``amount`` (display string such as "£4.50").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from checkpoints.business import (
    DUPLICATE_WINDOW_HOURS,
    REFUND_WINDOW_DAYS,
    BusinessRuleError,
    BusinessStore,
    Card,
    NotFoundError,
    Refund,
    Transaction,
    Transfer,
    money,
)
from graph.contracts.errors import ModelBehaviorError

__all__ = [
    "ToolContext",
    "ToolSpec",
    "ToolArgumentError",
    "TOOLS",
    "AGENTS_WITH_TOOLS",
    "POLICY_KB",
    "POLICY_SOURCE",
    "PolicyEntry",
    "match_policy_topic",
    "tools_for",
    "as_langchain_tool",
    "schema_tool",
    "run_tool",
    "refund_idempotency_key",
    "freeze_idempotency_key",
    "unfreeze_idempotency_key",
]


class ToolArgumentError(ModelBehaviorError, ValueError):
    """The model asked for an unknown tool, a tool of another agent, or passed arguments that do not
    validate against the tool's schema. One-line message, suitable for a ToolMessage back to the model. A
    :class:`~graph.contracts.errors.ModelBehaviorError`, and a ``ValueError`` for callers that treat it as bad arguments."""


@dataclass(frozen=True)
class ToolContext:
    """Who the tool acts for, supplied by the graph from the run context (never from the model).

    customer_id: the authenticated customer; tenant_id: their tenant; thread_id: the conversation
    (LangGraph thread); task_id: the support task (used in idempotency keys; None -> thread_id is used); turn: the
    request within the thread (the graph state's ``turn``, or any other id of one customer request), part of a card
    action's idempotency key so a retry or resume of the same request is answered from its key while a new request
    in the same task ("freeze it" again after an unfreeze) acts; None -> the key
    names the task only (one action per task and card).
    """

    customer_id: str
    tenant_id: str
    thread_id: str
    task_id: str | None = None
    turn: int | str | None = None

    @property
    def task_key(self) -> str:
        """The task id for idempotency keys (``task_id``, or ``thread_id`` when there is no task)."""
        return self.task_id or self.thread_id

    @property
    def request_key(self) -> str:
        """The task and the request within it for a card action's idempotency key: ``{task_key}`` without a
        ``turn``, else ``{task_key}:t{turn}``."""
        return self.task_key if self.turn is None else f"{self.task_key}:t{self.turn}"


@dataclass(frozen=True)
class ToolSpec:
    """One business tool.

    name: unique tool name (what the model calls); description: for the model; args_schema: pydantic
    model of the model-visible arguments (extra fields forbidden); agent: the specialist that owns it;
    side_effect: True when it changes business state; fn: ``fn(store, ctx, **args) -> dict``."""

    name: str
    description: str
    args_schema: type[BaseModel]
    agent: str
    side_effect: bool
    fn: Callable[..., dict[str, Any]]


# --------------------------------------------------------------------------------------------------
# Argument schemas (model-visible arguments only)
# --------------------------------------------------------------------------------------------------

_TX_ID = r"^tx_[A-Za-z0-9_]{1,40}$"
_RF_ID = r"^rf_[A-Za-z0-9_]{1,40}$"
_TR_ID = r"^tr_[A-Za-z0-9_]{1,40}$"


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class NoArgs(_Args):
    """No arguments."""


class FindDuplicateChargesArgs(_Args):
    merchant: str | None = Field(None, min_length=2, max_length=60,
                                 description="Only this merchant's card payments (a name the customer gave, "
                                             "such as Tesco); omit to check all of them.")


class ListRecentTransactionsArgs(_Args):
    limit: int = Field(5, ge=1, le=20, description="How many of the newest transactions (1-20).")


class TransactionIdArgs(_Args):
    transaction_id: str = Field(..., pattern=_TX_ID, description="A transaction id such as tx_1008.")


class RefundStatusArgs(_Args):
    refund_id: str | None = Field(
        None, pattern=_RF_ID,
        description="A refund id such as rf_5001; omit to list all of the customer's refunds.")


class RefundIdArgs(_Args):
    refund_id: str = Field(..., pattern=_RF_ID, description="A refund id such as rf_5001.")


class RequestRefundArgs(_Args):
    transaction_id: str = Field(..., pattern=_TX_ID, description="The transaction to refund, e.g. tx_1008.")
    reason: str = Field(..., min_length=1, max_length=200,
                        description="Short reason in the customer's terms, e.g. 'duplicate charge'.")


class FreezeCardArgs(_Args):
    card_id: str = Field(..., min_length=1, max_length=40,
                         description="The card id from card_status, or the card's last four digits.")


class TransferStatusArgs(_Args):
    transfer_id: str = Field(..., pattern=_TR_ID, description="A transfer id such as tr_3002.")


class LookupPolicyArgs(_Args):
    topic: str = Field(..., min_length=1, max_length=200,
                       description="Topic or question, e.g. 'fees', 'age limit', 'exchange rates'.")


# --------------------------------------------------------------------------------------------------
# Result shaping
# --------------------------------------------------------------------------------------------------


def _tx_view(tx: Transaction) -> dict[str, Any]:
    return {**tx.to_dict(), "amount": money(tx.amount_minor, tx.currency)}


def _refund_view(rf: Refund, store: BusinessStore | None = None) -> dict[str, Any]:
    view = {**rf.to_dict(), "amount": money(rf.amount_minor, rf.currency)}
    view.pop("idempotency_key", None)
    if store is not None:
        tx = store.get_transaction(rf.customer_id, rf.transaction_id)
        if tx is not None:
            view["merchant"] = tx.merchant
        if rf.status == "executed":  # when the money arrived: the credit the payout posted (reference = the refund)
            credit = store.refund_credit(rf.customer_id, rf.id)
            if credit is not None:
                view["paid_at"], view["credit_transaction_id"] = credit.created_at, credit.id
        if rf.status == "expired":  # when its approval deadline ended it: the time of the expire decision
            decision = store.refund_decision(rf.id)
            if decision is not None:
                view["expired_at"] = decision.decided_at
        if rf.status == "rejected":  # when a person (or the house rules) rejected it; the note stays internal
            decision = store.refund_decision(rf.id)
            if decision is not None:
                view["rejected_at"] = decision.decided_at
    return view


def _card_view(card: Card) -> dict[str, Any]:
    return card.to_dict()


def _transfer_view(tr: Transfer) -> dict[str, Any]:
    return {**tr.to_dict(), "amount": money(tr.amount_minor, tr.currency)}


def _refused(error: str) -> dict[str, Any]:
    return {"ok": False, "error": error}


# --------------------------------------------------------------------------------------------------
# The policy knowledge base (source: this module; a fictional demo bank, numbers are illustrative)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyEntry:
    """One knowledge-base entry: ``key`` (topic id), ``title``, ``text`` (customer-facing), and
    ``keywords`` used by :func:`match_policy_topic`."""

    key: str
    title: str
    text: str
    keywords: tuple[str, ...]


POLICY_SOURCE = "Switchboard demo bank policy handbook v1 (fictional; nodes/tools.py)"

POLICY_KB: dict[str, PolicyEntry] = {e.key: e for e in [
    PolicyEntry(
        "fees", "Fees",
        "Standard plan: card payments in the account currency are free; foreign-currency card payments "
        "carry a 0.5% exchange fee on weekdays and 1% at weekends; each ATM withdrawal costs a flat "
        "£1.50; UK transfers are free, international transfers cost £0.50; topping up with a UK debit "
        "card or by bank transfer is free, with a credit card or non-UK card it costs 0.5%; a "
        "replacement physical card costs £5.",
        ("fee", "fees", "charge", "charged", "cost", "commission", "price", "pricing", "free")),
    PolicyEntry(
        "limits", "Limits",
        "Daily limits: card payments £5,000; ATM withdrawals £500; outgoing transfers £25,000; top-ups "
        "£10,000 per day and a maximum balance of £50,000. Up to 5 disposable virtual cards can be "
        "created per day.",
        ("limit", "limits", "maximum", "max", "how much", "cap", "disposable")),
    PolicyEntry(
        "countries", "Supported countries",
        "Accounts can be opened by residents of the UK, the EEA and Switzerland. The card works "
        "worldwide wherever Mastercard is accepted.",
        ("country", "countries", "live", "resident", "abroad", "europe", "eea", "where")),
    PolicyEntry(
        "currencies", "Supported currencies",
        "You can hold and exchange GBP, EUR, USD, CHF, PLN, SEK, NOK, DKK, CZK, HUF, RON and JPY. "
        "Card payments in other currencies are converted at the time of payment.",
        ("currency", "currencies", "hold", "fiat", "usd", "eur", "dollar", "euro")),
    PolicyEntry(
        "age", "Age limit",
        "You must be 18 or older to open an account.",
        ("age", "old", "years", "minimum age", "18", "teen", "child", "kid")),
    PolicyEntry(
        "top_up", "Top-up methods",
        "Top up with a debit or credit card, Apple Pay or Google Pay, or by bank transfer to your "
        "account details. Cash and cheques are not accepted. Card top-ups arrive instantly, bank "
        "transfers usually within a few hours.",
        ("top up", "top-up", "topup", "add money", "cash", "cheque", "deposit", "fund")),
    PolicyEntry(
        "exchange_rates", "Exchange rates",
        "Exchanges use the interbank rate, updated in real time on weekdays. At weekends a 1% markup "
        "applies because markets are closed. The rate you get is shown before you confirm an exchange "
        "in the app.",
        ("exchange", "rate", "rates", "convert", "conversion", "fx")),
    PolicyEntry(
        "verification", "Identity verification",
        "We verify identity because anti-money-laundering law requires it. You need a photo ID and a "
        "selfie; most checks finish within minutes, some take up to 2 business days. For large "
        "deposits we may also ask where the money comes from (source of funds).",
        ("verify", "verification", "identity", "id", "kyc", "passport", "selfie", "source of funds")),
    PolicyEntry(
        "atm", "ATMs",
        "The card works at ATMs showing the Mastercard logo worldwide; you need your PIN. Some ATM "
        "operators add their own fee, which the ATM shows before you confirm.",
        ("atm", "cash machine", "withdraw", "withdrawal", "cashpoint")),
    PolicyEntry(
        "card_network", "Card network",
        "Our physical and virtual cards are Mastercard debit cards.",
        ("visa", "mastercard", "network", "scheme")),
    PolicyEntry(
        "refunds", "Refunds",
        f"You can ask us to refund a posted card payment or fee up to {REFUND_WINDOW_DAYS} days after "
        "it was made. A refund starts as requested, is reviewed, and once approved is paid back to "
        "your account, usually within 5 business days. Merchant refunds take 5-10 business days to "
        "appear.",
        ("refund", "refunds", "money back", "reimburse", "return")),
    PolicyEntry(
        "transfer_times", "Transfer times",
        "UK transfers (Faster Payments) usually arrive within minutes; SEPA transfers within 1 "
        "business day; international SWIFT transfers in 1-5 business days.",
        ("transfer", "transfers", "arrive", "how long", "sepa", "swift", "send money")),
]}


#: The bank's handbook data the tools read (``policy_topics``, ``card_delivery_business_days``); the embedded model reads
#: the same file for its own intents and answers.
HANDBOOK_PATH = Path(__file__).resolve().parent / "data" / "desk_knowledge.json"


@lru_cache(maxsize=1)
def _handbook() -> dict[str, Any]:
    """The parsed handbook file (cached). Raises ``OSError`` / ``ValueError`` for a missing or bad file."""
    with open(HANDBOOK_PATH, encoding="utf-8") as fh:
        return dict(json.load(fh))


def _knowledge_topics() -> dict[str, PolicyEntry]:
    return {k: PolicyEntry(k, v["title"], v["text"], tuple(v.get("keywords", ())))
            for k, v in (_handbook().get("policy_topics") or {}).items()}


# More topics of the same policy document, kept as data in nodes/data/desk_knowledge.json ("policy_topics").
POLICY_KB.update({k: v for k, v in _knowledge_topics().items() if k not in POLICY_KB})


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def match_policy_topic(text: str) -> str | None:
    """The :data:`POLICY_KB` key that best matches ``text`` (an exact key or title wins; otherwise the
    most keyword hits, single words matched as words and phrases as substrings), or None if nothing
    matches."""
    lowered = text.strip().lower()
    norm = lowered.replace(" ", "_").replace("-", "_")
    for key, entry in POLICY_KB.items():
        if norm == key or lowered == entry.title.lower():
            return key
    words = _words(lowered)
    best, best_score = None, 0
    for key, entry in POLICY_KB.items():
        score = 0
        for kw in entry.keywords:
            if " " in kw or "-" in kw:
                score += 2 if kw in lowered else 0
            elif kw in words:
                score += 1
        if score > best_score:
            best, best_score = key, score
    return best


# --------------------------------------------------------------------------------------------------
# Tool functions: fn(store, ctx, **args) -> dict
# --------------------------------------------------------------------------------------------------

_TX_EXPLANATIONS = {
    ("card_payment", "pending"): "The merchant has authorised this payment but not settled it yet; the "
                                 "money is on hold. Most pending payments settle within 7 days; if the "
                                 "merchant never settles, the hold drops off automatically.",
    ("card_payment", "declined"): "This payment was declined, so no money left your account. Common "
                                  "causes are a blocked or frozen card, insufficient balance, or a "
                                  "currency or merchant the card cannot be used for.",
    ("card_payment", "reverted"): "The merchant cancelled this payment after authorising it; the money "
                                  "is back in your account.",
    ("card_payment", "posted"): "A completed card payment to this merchant.",
    ("atm", "posted"): "A cash withdrawal at an ATM.",
    ("atm", "pending"): "A cash withdrawal the ATM operator has not confirmed yet.",
    ("fee", "posted"): "A fee charged under your plan's fee schedule.",
    ("transfer_out", "posted"): "An outgoing bank transfer.",
    ("transfer_in", "posted"): "Money received into your account.",
    ("top_up", "posted"): "A top-up of your account.",
}


def _list_recent_transactions(store: BusinessStore, ctx: ToolContext, limit: int = 5) -> dict[str, Any]:
    txs = store.list_transactions(ctx.customer_id, limit=limit)
    return {"ok": True, "transactions": [_tx_view(t) for t in txs], "count": len(txs)}


#: How many of the customer's newest transactions a merchant named to ``find_duplicate_charges`` is looked for in.
_MERCHANT_LOOKBACK = 100


def _find_duplicate_charges(store: BusinessStore, ctx: ToolContext, merchant: str | None = None) -> dict[str, Any]:
    """Duplicate pairs of the customer's card payments; with ``merchant`` (case-insensitive part of a merchant's name)
    only that merchant's pairs plus its card payments (``merchant_payments``), so "charged twice at Tesco" is answered
    about Tesco. A merchant matching none of the last :data:`_MERCHANT_LOOKBACK` transactions
    is ignored (``merchant_found`` False) and every pair is returned."""
    name = (merchant or "").strip().lower()
    named = [t for t in store.list_transactions(ctx.customer_id, limit=_MERCHANT_LOOKBACK)
             if name and name in t.merchant.lower()] if name else []
    pairs = []
    for original, duplicate in store.find_duplicate_charges(ctx.customer_id):
        if named and name not in duplicate.merchant.lower():
            continue
        refunds = [r for r in store.refunds_for_transaction(ctx.customer_id, duplicate.id)
                   if r.status in ("requested", "approved", "executed")]
        pairs.append({
            "original": _tx_view(original),
            "duplicate": _tx_view(duplicate),
            "existing_refund": _refund_view(refunds[0]) if refunds else None,
        })
    result: dict[str, Any] = {"ok": True, "duplicates": pairs, "count": len(pairs),
                              "rule": f"same merchant, amount, currency and card, posted within "
                                      f"{DUPLICATE_WINDOW_HOURS} h"}
    if name:
        result |= {"merchant": merchant, "merchant_found": bool(named),
                   "merchant_payments": [_tx_view(t) for t in named if t.kind == "card_payment"][:10]}
    return result


def _explain_transaction(store: BusinessStore, ctx: ToolContext, transaction_id: str) -> dict[str, Any]:
    tx = store.get_transaction(ctx.customer_id, transaction_id)
    if tx is None:
        return _refused(f"no such transaction {transaction_id} on your account")
    explanation = _TX_EXPLANATIONS.get((tx.kind, tx.status), f"A {tx.kind.replace('_', ' ')} "
                                                             f"that is {tx.status}.")
    if tx.kind == "fee" and tx.reference:
        explanation += f" It belongs to {tx.reference}."
    card = store.get_card(ctx.customer_id, tx.card_id) if tx.card_id else None
    return {"ok": True, "transaction": _tx_view(tx), "explanation": explanation,
            "card_last4": card.last4 if card else None}


def _explain_fees(store: BusinessStore, ctx: ToolContext) -> dict[str, Any]:
    fees = store.list_transactions(ctx.customer_id, limit=20, kind="fee")
    entry = POLICY_KB["fees"]
    return {"ok": True, "fees_charged": [_tx_view(t) for t in fees], "count": len(fees),
            "schedule": entry.text, "source": POLICY_SOURCE}


def _refund_status(store: BusinessStore, ctx: ToolContext, refund_id: str | None = None) -> dict[str, Any]:
    if refund_id is not None:
        rf = store.get_refund(ctx.customer_id, refund_id)
        if rf is None:
            return _refused(f"no such refund {refund_id} on your account")
        refunds = [rf]
    else:
        refunds = store.list_refunds(ctx.customer_id)
    return {"ok": True, "refunds": [_refund_view(r, store) for r in refunds], "count": len(refunds)}


def _check_refund_eligibility(store: BusinessStore, ctx: ToolContext,
                              transaction_id: str) -> dict[str, Any]:
    tx = store.get_transaction(ctx.customer_id, transaction_id)
    if tx is None:
        return _refused(f"no such transaction {transaction_id} on your account")
    eligible, reason = store.refund_eligibility(ctx.customer_id, transaction_id)
    recent = store.refunds_in_last_days(ctx.customer_id, 30)
    result = {"ok": True, "eligible": eligible, "reason": reason, "transaction": _tx_view(tx),
              "refunds_last_30_days": len(recent)}
    rejected = [r for r in store.refunds_for_transaction(ctx.customer_id, tx.id) if r.status == "rejected"]
    if rejected:  # a new request goes to a person, never paid automatically (policies.risk.REJECTED_BEFORE)
        result["rejected_refund"] = _refund_view(rejected[-1], store)
    return result


def refund_idempotency_key(ctx: ToolContext, transaction_id: str) -> str:
    """``refund:{task}:{transaction_id}`` with task = ``ctx.task_id`` or ``ctx.thread_id``."""
    return f"refund:{ctx.task_key}:{transaction_id}"


def freeze_idempotency_key(ctx: ToolContext, card_id: str) -> str:
    """``freeze:{task}:{card_id}`` with task = ``ctx.task_id`` or ``ctx.thread_id``, and ``:t{turn}`` after the task
    when ``ctx.turn`` is set (:attr:`ToolContext.request_key`): one freeze per request, not one per task."""
    return f"freeze:{ctx.request_key}:{card_id}"


def unfreeze_idempotency_key(ctx: ToolContext, card_id: str) -> str:
    """``unfreeze:{task}:{card_id}``, made like :func:`freeze_idempotency_key`."""
    return f"unfreeze:{ctx.request_key}:{card_id}"


def _request_refund(store: BusinessStore, ctx: ToolContext, transaction_id: str,
                    reason: str) -> dict[str, Any]:
    tx = store.get_transaction(ctx.customer_id, transaction_id)
    if tx is None:
        return _refused(f"no such transaction {transaction_id} on your account")
    key = refund_idempotency_key(ctx, transaction_id)
    replayed = store.find_refund_by_key(key) is not None
    refund = store.request_refund(ctx.customer_id, transaction_id, tx.amount_minor, tx.currency,
                                  reason, key)
    return {"ok": True, "refund": _refund_view(refund, store), "transaction": _tx_view(tx),
            "replayed": replayed,
            "note": "The refund is requested, not paid: it is paid after review/approval."}


def _cancel_refund(store: BusinessStore, ctx: ToolContext, refund_id: str) -> dict[str, Any]:
    """Cancel the caller's refund ``refund_id`` that is still waiting (``requested`` or ``approved``) and that no
    conversation's approval decides (``BusinessStore.cancel_orphan_refund``); nothing is paid. Refused: not the
    caller's refund, already paid/rejected/cancelled/expired, or waiting for an approver in a conversation (that
    conversation cancels it: README "Cancelling a paused refund"). The model calls it only after the customer
    confirmed (the refunds agent asks first: ``nodes.embedded.playbook``'s cancel question)."""
    rf = store.get_refund(ctx.customer_id, refund_id)
    if rf is None:
        return _refused(f"no such refund {refund_id} on your account")
    if rf.status not in ("requested", "approved"):
        return _refused(f"refund {rf.id} is already {_REFUND_DONE.get(rf.status, rf.status)}, so it can't be cancelled")
    try:
        cancelled = store.cancel_orphan_refund(rf.id)
    except BusinessRuleError:
        return _refused(f"refund {rf.id} is waiting for an approver's decision in the conversation where you asked "
                        "for it; write \"cancel my refund\" there")
    except NotFoundError:
        return _refused(f"no such refund {refund_id} on your account")
    return {"ok": True, "refund": _refund_view(cancelled, store),
            "note": "The refund is cancelled: nothing was paid and nothing will be."}


#: How a refund that can no longer be cancelled ended, in the customer's words (:func:`_cancel_refund`).
_REFUND_DONE = {"executed": "paid back to your account", "rejected": "rejected after review", "cancelled": "cancelled",
                "expired": "expired"}


def _card_status(store: BusinessStore, ctx: ToolContext) -> dict[str, Any]:
    cards = store.list_cards(ctx.customer_id)
    return {"ok": True, "cards": [_card_view(c) for c in cards], "count": len(cards)}


def _named_card(store: BusinessStore, ctx: ToolContext, card_id: str) -> Card | dict[str, Any]:
    """The caller's card named exactly by ``card_id`` (its id, or last four digits matching one card), or the refusal
    dict: another customer's id or an unknown one is refused, never replaced by a card of the caller's."""
    cards = store.list_cards(ctx.customer_id)
    if re.fullmatch(r"\d{4}", card_id):
        matches = [c for c in cards if c.last4 == card_id]
        if len(matches) != 1:
            return _refused(f"no such card ending {card_id} on your account (or more than one)")
        return matches[0]
    found = next((c for c in cards if c.id == card_id), None)
    return found if found is not None else _refused(f"no such card {card_id} on your account")


def _freeze_card(store: BusinessStore, ctx: ToolContext, card_id: str) -> dict[str, Any]:
    """Freeze the caller's card named exactly by ``card_id`` (see :func:`_named_card`)."""
    card = _named_card(store, ctx, card_id)
    if isinstance(card, dict):
        return card
    return _read_back(store, ctx, store.freeze_card(ctx.customer_id, card.id, freeze_idempotency_key(ctx, card.id)))


def _read_back(store: BusinessStore, ctx: ToolContext, result: dict[str, Any]) -> dict[str, Any]:
    """A card action's result with ``status`` read back from the store after the action, so no answer claims a state
    the card does not have. A
    replayed result whose card has changed since (``status`` differs from the recorded one) says so with
    ``"changed_since": True``."""
    card = store.get_card(ctx.customer_id, str(result["card_id"]))
    now = card.status if card is not None else result.get("status")
    out = {"ok": True, **result, "status": now}
    if now != result.get("status"):
        out["changed_since"] = True
    return out


def _list_transfers(store: BusinessStore, ctx: ToolContext) -> dict[str, Any]:
    transfers = store.list_transfers(ctx.customer_id)
    return {"ok": True, "transfers": [_transfer_view(t) for t in transfers], "count": len(transfers)}


_TRANSFER_EXPLANATIONS = {
    "pending": "It has been sent for processing and not yet confirmed by the receiving bank; UK "
               "transfers usually complete within minutes, international ones within 1-5 business days.",
    "completed": "It has left your account and been delivered to the recipient's bank.",
    "failed": "It did not go through and the money was returned to your account.",
    "cancelled": "It was cancelled before it was sent; no money left your account.",
}


def _transfer_status(store: BusinessStore, ctx: ToolContext, transfer_id: str) -> dict[str, Any]:
    tr = store.get_transfer(ctx.customer_id, transfer_id)
    if tr is None:
        return _refused(f"no such transfer {transfer_id} on your account")
    return {"ok": True, "transfer": _transfer_view(tr),
            "explanation": _TRANSFER_EXPLANATIONS.get(tr.status, "")}


def _mask_email(email: str) -> str:
    local, _, domain = email.partition("@")
    return f"{local[:1]}***@{domain}" if domain else "***"


def _account_profile(store: BusinessStore, ctx: ToolContext) -> dict[str, Any]:
    customer = store.get_customer(ctx.customer_id, ctx.tenant_id)
    if customer is None:
        return _refused("no account found for this customer")
    cards = store.list_cards(ctx.customer_id)
    return {"ok": True, "customer": {
        "id": customer.id, "name": customer.name, "email": _mask_email(customer.email),
        "plan": customer.flags.get("plan"), "identity_verified": customer.flags.get("identity_verified"),
        "country": customer.flags.get("country"),
    }, "active_cards": sum(1 for c in cards if c.status == "active")}


def _lookup_policy(store: BusinessStore, ctx: ToolContext, topic: str) -> dict[str, Any]:
    key = match_policy_topic(topic)
    if key is None:
        return {"ok": False, "error": f"no policy entry matches {topic!r}",
                "topics": sorted(POLICY_KB)}
    entry = POLICY_KB[key]
    return {"ok": True, "topic": entry.key, "title": entry.title, "text": entry.text,
            "source": POLICY_SOURCE}


class CardRefArgs(_Args):
    card_id: str = Field(..., min_length=1, max_length=40,
                         description="The card id from card_status, or the card's last four digits.")


class ServiceRequestArgs(_Args):
    kind: Literal["close_account", "freeze_account", "unfreeze_account"] = Field(
        ..., description="What the operator is asked to do: close_account, freeze_account or unfreeze_account.")


class WithdrawRequestArgs(_Args):
    kind: Literal["close_account", "freeze_account", "unfreeze_account"] | None = Field(
        None, description="Which open request to withdraw; omitted: the customer's newest open request.")


_OUTGOING_KINDS = ("card_payment", "atm", "fee", "transfer_out")
_INCOMING_KINDS = ("transfer_in", "top_up")


def _card_delivery_estimate(store: BusinessStore, ctx: ToolContext) -> dict[str, Any]:
    customer = store.get_customer(ctx.customer_id, ctx.tenant_id)
    country = str((customer.flags.get("country") if customer else None) or "")
    days = {k: (int(v[0]), int(v[1])) for k, v in (_handbook().get("card_delivery_business_days") or {}).items()}
    lo, hi = days.get(country) or days.get("default", (7, 12))
    return {"ok": True, "country": country or None, "min_business_days": lo, "max_business_days": hi}


def _unfreeze_card(store: BusinessStore, ctx: ToolContext, card_id: str) -> dict[str, Any]:
    """Unfreeze the caller's card named exactly by ``card_id`` (see :func:`_named_card`); naming it is the
    confirmation."""
    card = _named_card(store, ctx, card_id)
    if isinstance(card, dict):
        return card
    return _read_back(store, ctx, store.unfreeze_card(ctx.customer_id, card.id, unfreeze_idempotency_key(ctx, card.id)))


def _money_totals(txs: list[Transaction], kinds: tuple[str, ...]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for tx in txs:
        if tx.kind in kinds and tx.status == "posted":
            totals[tx.currency] = totals.get(tx.currency, 0) + tx.amount_minor
    return totals


def _spending_summary(store: BusinessStore, ctx: ToolContext) -> dict[str, Any]:
    txs = store.list_transactions(ctx.customer_id, limit=100)
    spent = _money_totals(txs, ("card_payment", "atm", "fee"))
    by_merchant: dict[str, int] = {}
    for tx in txs:
        if tx.kind == "card_payment" and tx.status == "posted":
            by_merchant[tx.merchant] = by_merchant.get(tx.merchant, 0) + tx.amount_minor
    top = sorted(by_merchant.items(), key=lambda kv: -kv[1])[:3]
    return {"ok": True, "spent": [{"currency": c, "amount_minor": v, "amount": money(v, c)} for c, v in spent.items()],
            "top_merchants": [{"merchant": m, "amount_minor": v} for m, v in top],
            "transactions_counted": sum(1 for t in txs if t.kind in ("card_payment", "atm", "fee") and t.status == "posted")}


def _account_balance(store: BusinessStore, ctx: ToolContext) -> dict[str, Any]:
    txs = store.list_transactions(ctx.customer_id, limit=10_000)
    incoming, outgoing = _money_totals(txs, _INCOMING_KINDS), _money_totals(txs, _OUTGOING_KINDS)
    held: dict[str, int] = {}
    for tx in txs:
        if tx.kind in _OUTGOING_KINDS and tx.status == "pending":
            held[tx.currency] = held.get(tx.currency, 0) + tx.amount_minor
    balances = []
    for ccy in sorted(set(incoming) | set(outgoing)):
        minor = incoming.get(ccy, 0) - outgoing.get(ccy, 0)
        available = minor - held.get(ccy, 0)
        balances.append({"currency": ccy, "amount_minor": minor, "amount": money(minor, ccy),
                         "available_minor": available, "available": money(available, ccy)})
    return {"ok": True, "balances": balances, "as_of": store.now().isoformat(timespec="seconds")}


def _request_operator_case(store: BusinessStore, ctx: ToolContext, kind: str) -> dict[str, Any]:
    return {"ok": True, **store.open_service_request(ctx.customer_id, kind, f"service:{ctx.task_key}:{kind}")}


def _withdraw_operator_case(store: BusinessStore, ctx: ToolContext, kind: str | None = None) -> dict[str, Any]:
    """Withdraw the caller's newest open service request (of ``kind``), at the customer's wish. Result:
    ``{"ok": True, "withdrawn": True, "request_id", "kind", "status": "cancelled", …}``, or ``{"ok": True,
    "withdrawn": False, "kind"}`` when none is open (nothing to do is no error)."""
    withdrawn = store.cancel_service_request(ctx.customer_id, kind)
    if withdrawn is None:
        return {"ok": True, "withdrawn": False, "kind": kind}
    return {"ok": True, "withdrawn": True, **withdrawn}


_DESK_TOOLS: list[ToolSpec] = [
    ToolSpec("card_delivery_estimate",
             "How many business days a new or replacement card takes to arrive at the customer's address.",
             NoArgs, "cards", False, _card_delivery_estimate),
    ToolSpec("unfreeze_card",
             "Unfreeze one of the customer's frozen cards (by card id or last four digits). Only when the customer "
             "named the card and asked for it.",
             CardRefArgs, "cards", True, _unfreeze_card),
    ToolSpec("spending_summary",
             "Total spent by card, at ATMs and in fees over the newest 100 transactions, by currency, and the top "
             "merchants.",
             NoArgs, "billing", False, _spending_summary),
    ToolSpec("account_balance",
             "The customer's balance per currency from posted transactions, and what is available after pending "
             "payments.",
             NoArgs, "account", False, _account_balance),
    ToolSpec("request_operator_case",
             "Ask an operator to close, freeze or unfreeze the customer's account (the agent cannot do it itself); opens one "
             "request per task.",
             ServiceRequestArgs, "account", True, _request_operator_case),
    ToolSpec("withdraw_operator_case",
             "Withdraw the customer's open request to our team (close, freeze or unfreeze the account) when the "
             "customer asks to cancel it.",
             WithdrawRequestArgs, "account", True, _withdraw_operator_case),
]


# --------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------

TOOLS: dict[str, ToolSpec] = {s.name: s for s in [
    ToolSpec("list_recent_transactions",
             "List the customer's newest transactions (id, merchant, amount, status, time).",
             ListRecentTransactionsArgs, "billing", False, _list_recent_transactions),
    ToolSpec("find_duplicate_charges",
             "Find card payments charged twice (same merchant, amount and card within 24 hours); "
             "returns (original, duplicate) pairs and any refund already open for the duplicate.",
             FindDuplicateChargesArgs, "billing", False, _find_duplicate_charges),
    ToolSpec("explain_transaction",
             "Explain one of the customer's transactions: what it is and why it is pending, declined, "
             "reverted or charged.",
             TransactionIdArgs, "billing", False, _explain_transaction),
    ToolSpec("explain_fees",
             "List fees charged to the customer and the fee schedule.",
             NoArgs, "billing", False, _explain_fees),
    ToolSpec("refund_status",
             "Status of one refund (by id) or of all the customer's refunds.",
             RefundStatusArgs, "refunds", False, _refund_status),
    ToolSpec("check_refund_eligibility",
             "Check whether one of the customer's transactions can be refunded, and why not.",
             TransactionIdArgs, "refunds", False, _check_refund_eligibility),
    ToolSpec("request_refund",
             "Open a refund request for the full amount of one of the customer's transactions. Creates "
             "a REQUESTED refund that is paid only after review; it does not pay anything now.",
             RequestRefundArgs, "refunds", True, _request_refund),
    ToolSpec("cancel_refund",
             "Cancel one of the customer's refunds that is still waiting (requested or approved); nothing is paid. "
             "Only after the customer asked to cancel it and confirmed.",
             RefundIdArgs, "refunds", True, _cancel_refund),
    ToolSpec("card_status",
             "List the customer's cards with last four digits, kind and status.",
             NoArgs, "cards", False, _card_status),
    ToolSpec("freeze_card",
             "Freeze one of the customer's cards (by card id or last four digits) so it cannot be used.",
             FreezeCardArgs, "cards", True, _freeze_card),
    ToolSpec("list_transfers",
             "List the customer's outgoing transfers with status.",
             NoArgs, "transfers", False, _list_transfers),
    ToolSpec("transfer_status",
             "Status and explanation of one of the customer's transfers.",
             TransferStatusArgs, "transfers", False, _transfer_status),
    ToolSpec("account_profile",
             "The customer's profile: name, masked email, plan, identity verification, country.",
             NoArgs, "account", False, _account_profile),
    ToolSpec("lookup_policy",
             "Look up the bank's published policy on a topic: " + ", ".join(sorted(POLICY_KB)) + ".",
             LookupPolicyArgs, "policy", False, _lookup_policy),
]}

TOOLS.update({s.name: s for s in _DESK_TOOLS})

#: The agents that own at least one business tool.
AGENTS_WITH_TOOLS: tuple[str, ...] = tuple(dict.fromkeys(s.agent for s in TOOLS.values()))


def tools_for(agent: str) -> list[ToolSpec]:
    """The tools owned by ``agent``, in registry order ([] for agents without business tools, such as
    triage or fallback)."""
    return [s for s in TOOLS.values() if s.agent == agent]


def _not_executable(**_: Any) -> Any:
    raise RuntimeError("switchboard tool schemas are bound to models only: the graph decides and runs every call "
                       "itself (business tools through nodes.tools.run_tool)")


def schema_tool(name: str, description: str, args_schema: type[BaseModel]) -> Any:
    """A ``langchain_core.tools.StructuredTool`` that only carries a name, a description and an args schema, for
    ``model.bind_tools([...])`` (business tools, ``transfer_to_*`` handoffs, ``expert_*`` experts). Calling it
    raises RuntimeError: the graph decides and runs every tool call itself."""
    from langchain_core.tools import StructuredTool

    return StructuredTool.from_function(func=_not_executable, name=name, description=description,
                                        args_schema=args_schema, infer_schema=False)


def as_langchain_tool(spec: ToolSpec) -> Any:
    """:func:`schema_tool` of a business tool: the graph runs it via :func:`run_tool` with the run context."""
    return schema_tool(spec.name, spec.description, spec.args_schema)


def _validation_reason(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unexpected argument (identity comes from the session, not from arguments)"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


def run_tool(name: str, args: dict[str, Any] | None, store: BusinessStore, ctx: ToolContext, *,
             agent: str | None = None) -> dict[str, Any]:
    """Validate ``args`` against the tool's schema and run it for ``ctx``.

    Returns the tool's JSON-serialisable dict; business refusals (including a
    :class:`~checkpoints.business.BusinessRuleError` raised by the store) come back as
    ``{"ok": False, "error": "..."}``. Raises :class:`ToolArgumentError` (one line) for an unknown
    tool, a tool not owned by ``agent`` (when given), or arguments that fail validation (including any
    extra argument such as a model-written ``customer_id``). ``StaleVersionError`` / ``OwnershipError``
    from the store propagate: the caller re-reads and decides again."""
    spec = TOOLS.get(name)
    if spec is None:
        raise ToolArgumentError(f"unknown tool {name!r}")
    if agent is not None and spec.agent != agent:
        raise ToolArgumentError(f"tool {name!r} belongs to the {spec.agent} agent, not {agent}")
    if args is not None and not isinstance(args, dict):
        raise ToolArgumentError(f"arguments for {name} must be an object, got {type(args).__name__}")
    try:
        parsed = spec.args_schema.model_validate(args or {})
    except ValidationError as exc:
        raise ToolArgumentError(f"bad arguments for {name}: {_validation_reason(exc)}") from None
    try:
        return spec.fn(store, ctx, **parsed.model_dump())
    except BusinessRuleError as exc:
        return _refused(str(exc))
