"""Facts: what is known about a request, each with its source (extraction used by every model, not only the
offline one).

Facts are ``dict[str, str]`` with the keys of :data:`FACT_KEYS` (all optional): ``transaction_id``,
``transaction_ids`` (comma-separated when the user named several), ``original_transaction_id``, ``refund_id``,
``refund_status``, ``transfer_id``, ``transfer_status``, ``card_last4`` and ``card_ref`` (user-said), ``card_id``
(system-verified), ``card_id_virtual`` / ``card_id_physical`` (system-verified: the one usable card of that kind),
``card_status``, ``merchant``, ``amount`` ("4.50 GBP"), ``amount_minor`` ("450"), ``currency`` ("GBP"),
``refund_eligible`` ("yes"/"no"), ``policy_topic``.

* :func:`extract_facts` — user-said facts found in a customer message (ids, card digits, an amount);
* :func:`facts_from_tool_result` — system-verified facts found in a business tool's result;
* :func:`collect_facts` — both over a transcript, as typed :class:`graph.contracts.packet.Fact` with their source.

The patterns are this module's own (no dataset text).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from checkpoints.business import money_plain, parse_money
from graph.contracts.packet import Fact
from nodes.transcript import fold_transcript, last_user_text

__all__ = ["FACT_KEYS", "USER_SAID_KEYS", "VERIFIED_KEYS", "extract_facts", "facts_from_tool_result", "collect_facts"]

FACT_KEYS = frozenset({
    "transaction_id", "transaction_ids", "original_transaction_id", "refund_id", "refund_status",
    "transfer_id", "transfer_status", "card_last4", "card_id", "card_ref", "card_status", "merchant", "amount",
    "amount_minor", "currency", "refund_eligible", "policy_topic", "card_id_virtual", "card_id_physical",
})


_TX_RE = re.compile(r"\btx_[A-Za-z0-9_]+\b")
_RF_RE = re.compile(r"\brf_[A-Za-z0-9_]+\b")
_TR_RE = re.compile(r"\btr_[A-Za-z0-9_]+\b")
_LAST4_RE = re.compile(
    r"(?:card|ending(?:\s+in|\s+with)?|ends\s+(?:in|with)|last\s+(?:four|4)(?:\s+digits)?(?:\s+(?:are|is))?)"
    r"\D{0,12}?(\d{4})\b", re.IGNORECASE)
#: "freeze 8899", "unfreeze 4242": four digits right after a card action word name a card.
_ACTION_LAST4_RE = re.compile(r"\b(?:un)?(?:freeze|block)\s+(\d{4})\b", re.IGNORECASE)
_CARD_RE = re.compile(r"\bcard_[A-Za-z0-9_]+\b")


def _amount_facts(text: str) -> dict[str, str]:
    """The first amount of money in ``text`` (``checkpoints.business.parse_money``: babel, "£5,000", "5,000.00 GBP",
    "12 euros") as ``amount`` "5000.00 GBP", ``amount_minor`` "500000", ``currency`` "GBP"; {} when there is none."""
    parsed = parse_money(text) if not re.fullmatch(r"[\d.,\s]+", text.strip()) else None
    if parsed is None:
        return {}
    minor, currency = parsed
    return {"amount": money_plain(minor, currency), "amount_minor": str(minor), "currency": currency}


def extract_facts(user_text: str) -> dict[str, str]:
    """User-said facts in ``user_text``: the first transaction id (``tx_…``; all of them, comma-joined,
    under ``transaction_ids`` when there are several), refund id (``rf_…``), transfer id (``tr_…``),
    card last four digits (only next to words like "card", "ending", "last four", or right after "freeze" /
    "unfreeze" / "block", so years and amounts are not mistaken), a card id the user named (``card_…`` ->
    ``card_ref``: resolved exactly, never replaced by another card), and the first amount with a currency ("£4.50",
    "£5,000", "5,000.00 GBP", "12 euros", read with babel through ``parse_money``) as ``amount`` "4.50 GBP",
    ``amount_minor`` "450", ``currency`` "GBP"."""
    facts: dict[str, str] = {}
    txs = list(dict.fromkeys(_TX_RE.findall(user_text)))
    if txs:
        facts["transaction_id"] = txs[0]
        if len(txs) > 1:
            facts["transaction_ids"] = ",".join(txs)
    if m := _RF_RE.search(user_text):
        facts["refund_id"] = m.group(0)
    if m := _TR_RE.search(user_text):
        facts["transfer_id"] = m.group(0)
    if m := _LAST4_RE.search(user_text) or _ACTION_LAST4_RE.search(user_text):
        facts["card_last4"] = m.group(1)
    if m := _CARD_RE.search(user_text):
        facts["card_ref"] = m.group(0)
    facts.update(_amount_facts(user_text))
    return facts


def _amount(d: Mapping[str, Any]) -> dict[str, str]:
    return {"amount": money_plain(d["amount_minor"], d["currency"]), "amount_minor": str(d["amount_minor"]),
            "currency": d["currency"]}


def _duplicates(result: Mapping[str, Any]) -> dict[str, str]:
    pairs = result.get("duplicates") or []
    if not pairs:
        return {}
    pair = pairs[-1]
    dup, orig = pair["duplicate"], pair["original"]
    facts = {"transaction_id": dup["id"], "original_transaction_id": orig["id"], "merchant": dup["merchant"],
             **_amount(dup)}
    if pair.get("existing_refund"):
        facts["refund_id"] = pair["existing_refund"]["id"]
        facts["refund_status"] = pair["existing_refund"]["status"]
    return facts


def _requested_refund(result: Mapping[str, Any]) -> dict[str, str]:
    rf = result["refund"]
    return {"refund_id": rf["id"], "refund_status": rf["status"], "transaction_id": rf["transaction_id"],
            "merchant": result["transaction"]["merchant"], **_amount(rf)}


def _refund_status(result: Mapping[str, Any]) -> dict[str, str]:
    refunds = result.get("refunds") or []
    if len(refunds) != 1:
        return {}
    rf = refunds[0]
    return {"refund_id": rf["id"], "refund_status": rf["status"], "transaction_id": rf["transaction_id"]}


def _eligibility(result: Mapping[str, Any]) -> dict[str, str]:
    tx = result["transaction"]
    return {"transaction_id": tx["id"], "refund_eligible": "yes" if result["eligible"] else "no",
            "merchant": tx["merchant"], **_amount(tx)}


def _explained(result: Mapping[str, Any]) -> dict[str, str]:
    tx = result["transaction"]
    return {"transaction_id": tx["id"], "merchant": tx["merchant"], **_amount(tx)}


def _cards(result: Mapping[str, Any]) -> dict[str, str]:
    cards = result.get("cards", [])
    # the one usable (not blocked or expired) card of each kind: the card a loss report naming its kind means ("my
    # virtual card was stolen" freezes the virtual card, never the physical default)
    by_kind = {f"card_id_{kind}": usable[0]["id"] for kind in ("virtual", "physical")
               if len(usable := [c for c in cards if c["kind"] == kind and c["status"] not in ("blocked", "expired")])
               == 1}
    if any(c["status"] == "frozen" for c in cards):
        return by_kind  # a card was already frozen: which one is lost now is for the customer to say
    active = [c for c in cards if c["status"] == "active"]
    physical = [c for c in active if c["kind"] == "physical"]
    chosen = (physical or active or [None])[0]
    return {**by_kind, "card_id": chosen["id"]} if chosen else by_kind


#: Tool name -> the function reading its result's verified facts.
_FROM_RESULT: dict[str, Callable[[Mapping[str, Any]], dict[str, str]]] = {
    "find_duplicate_charges": _duplicates,
    "request_refund": _requested_refund,
    "refund_status": _refund_status,
    "check_refund_eligibility": _eligibility,
    "explain_transaction": _explained,
    "card_status": _cards,
    "freeze_card": lambda r: {"card_id": r["card_id"], "card_status": r["status"]},
    "transfer_status": lambda r: {"transfer_id": r["transfer"]["id"], "transfer_status": r["transfer"]["status"]},
    "lookup_policy": lambda r: {"policy_topic": r["topic"]},
}


#: The keys :func:`extract_facts` can find in a customer's message (what a packet can carry as ``user_said``; read by
#: ``switchboard check``, ``graph.app.contract_check``). tests/policies/test_contracts.py checks it against :func:`extract_facts`.
USER_SAID_KEYS: frozenset[str] = frozenset({"transaction_id", "transaction_ids", "refund_id", "transfer_id",
                                            "card_last4", "card_ref", "amount", "amount_minor", "currency"})

_AMOUNT_KEYS = frozenset({"amount", "amount_minor", "currency"})
#: Tool name -> the keys of the facts its result can verify (:data:`_FROM_RESULT`; what a packet can carry as
#: ``system_verified`` after the tool ran, for ``switchboard check``). tests/policies/test_contracts.py checks every reader's
#: output against it.
VERIFIED_KEYS: dict[str, frozenset[str]] = {
    "find_duplicate_charges": frozenset({"transaction_id", "original_transaction_id", "merchant", "refund_id",
                                         "refund_status", *_AMOUNT_KEYS}),
    "request_refund": frozenset({"refund_id", "refund_status", "transaction_id", "merchant", *_AMOUNT_KEYS}),
    "refund_status": frozenset({"refund_id", "refund_status", "transaction_id"}),
    "check_refund_eligibility": frozenset({"transaction_id", "refund_eligible", "merchant", *_AMOUNT_KEYS}),
    "explain_transaction": frozenset({"transaction_id", "merchant", *_AMOUNT_KEYS}),
    "card_status": frozenset({"card_id", "card_id_virtual", "card_id_physical"}),
    "freeze_card": frozenset({"card_id", "card_status"}),
    "transfer_status": frozenset({"transfer_id", "transfer_status"}),
    "lookup_policy": frozenset({"policy_topic"}),
}


def facts_from_tool_result(tool_name: str, result: Mapping[str, Any]) -> dict[str, str]:
    """System-verified facts from one tool result, for the next plan step and for a handoff packet.

    find_duplicate_charges -> the latest pair's ``transaction_id`` (the duplicate),
    ``original_transaction_id``, ``merchant``, ``amount``/``amount_minor``/``currency``;
    request_refund / refund_status (single) -> ``refund_id``, ``refund_status``, ``transaction_id``;
    check_refund_eligibility -> ``transaction_id``, ``refund_eligible``; explain_transaction ->
    ``transaction_id``, ``merchant``, amount keys; card_status -> ``card_id`` of the active physical
    card (else the first active card) and ``card_id_virtual`` / ``card_id_physical`` (the one usable card of the
    kind); freeze_card -> ``card_id``, ``card_status``; transfer_status ->
    ``transfer_id``, ``transfer_status``; lookup_policy -> ``policy_topic``. A refusal (``ok`` False)
    or an unknown tool gives {}."""
    if not isinstance(result, Mapping) or not result.get("ok"):
        return {}
    read = _FROM_RESULT.get(tool_name)
    return read(result) if read is not None else {}


def _payload(m: ToolMessage) -> dict:
    try:
        data = json.loads(m.content) if isinstance(m.content, str) else m.content
    except (TypeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _verified_step(acc: tuple[dict[str, str], dict[str, str | None]], m: BaseMessage) -> None:
    """One message of the verified-facts scan of :func:`collect_facts`: a business tool's result adds its facts
    (newest wins) and when it ran."""
    if isinstance(m, ToolMessage) and m.name and not m.name.startswith("transfer_to_"):
        payload = _payload(m)
        if payload.get("ok", True):
            found = {k: str(v) for k, v in facts_from_tool_result(m.name, payload).items()}
            acc[0].update(found)
            at = (m.response_metadata or {}).get("observed_at")
            acc[1].update({k: str(at) if at else None for k in found})


def collect_facts(messages: list[BaseMessage], model_facts: Mapping[str, str] | None = None) -> list[Fact]:
    """Facts known so far in ``messages``, each with its source.

    System-verified: extracted by code from business-tool results in the transcript (newest wins), dated with the
    ``observed_at`` the tool message carries in its ``response_metadata`` (when the tool ran; None for older
    transcripts).
    User-said: extracted from the last user message. Model-written: a fact the model put in ``model_facts`` (the
    handoff's ``facts`` argument) that neither a tool verified nor the user said.
    """
    # the verified facts of the transcript, continuing the scan of the previous call (nodes.transcript.fold_transcript)
    verified, observed = fold_transcript("verified_facts", messages, lambda: ({}, {}), _verified_step,
                                         lambda acc: (dict(acc[0]), dict(acc[1])))
    said = {k: str(v) for k, v in extract_facts(last_user_text(messages)).items()}
    written = {str(k): str(v) for k, v in (model_facts or {}).items()
               if verified.get(str(k)) != str(v) and said.get(str(k)) != str(v) and str(k) not in said}
    facts = [Fact(key=k, value=v, source="system_verified", observed_at=observed.get(k)) for k, v in verified.items()]
    facts += [Fact(key=k, value=v, source="user_said") for k, v in said.items() if verified.get(k) != v]
    facts += [Fact(key=k, value=v, source="model_written") for k, v in written.items()]
    return facts
