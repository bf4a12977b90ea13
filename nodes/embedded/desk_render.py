"""Customer-facing wording of the desk tools added for the per-intent behaviours (``card_delivery_estimate``,
``unfreeze_card``, ``spending_summary``, ``account_balance``, ``request_operator_case``), used by the offline
playbook. Each renderer takes the tool's ``ok`` result dict (shapes: ``nodes.tools``) and returns one or two
sentences; ids shown are the customer's own references (request ids), never internal tool or card ids."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from checkpoints.business import money, parse_iso

__all__ = ["DESK_RENDERERS", "render_desk_tool", "count_words", "REQUEST_WORDS", "ACCOUNT_CANCEL_ANSWER"]


def count_words(n: int, noun: str, plural: str | None = None) -> str:
    """A count with its noun in the right number, for customer text: ``(0, "active card")`` -> ``"no active
    cards"``, ``(1, …)`` -> ``"1 active card"``, ``(3, …)`` -> ``"3 active cards"``; ``plural`` for nouns whose plural
    is not ``noun + "s"``."""
    many = plural or f"{noun}s"
    return f"no {many}" if n == 0 else f"1 {noun}" if n == 1 else f"{n} {many}"


def _delivery(r: dict[str, Any]) -> str:
    where = f" to an address in {r['country']}" if r.get("country") else ""
    return (f"A new or replacement card usually arrives within {r['min_business_days']} to "
            f"{r['max_business_days']} business days of ordering{where}.")


def _unfreeze(r: dict[str, Any]) -> str:
    if r.get("status") != "active":  # read back after the action (nodes.tools): never claim a state the card lacks
        return f"Your {r['kind']} card ending {r['last4']} is {r.get('status')}, not active: I couldn't unfreeze it."
    if r.get("already_active"):
        return f"Your {r['kind']} card ending {r['last4']} isn't frozen: it is active and ready to use."
    return f"I've unfrozen your {r['kind']} card ending {r['last4']}, so you can pay with it again."


def _spending(r: dict[str, Any]) -> str:
    spent = r.get("spent") or []
    if not spent:
        return "You haven't spent anything by card, at ATMs or in fees recently."
    totals = " and ".join(s["amount"] for s in spent)
    top = r.get("top_merchants") or []
    ccy = spent[0]["currency"]
    most = ", ".join(f"{m['merchant']} {money(m['amount_minor'], ccy)}" for m in top)
    n = int(r.get("transactions_counted", 0) or 0)
    over = ("In your one recent card payment, cash withdrawal or fee" if n == 1
            else f"Across your last {n} card payments, cash withdrawals and fees")
    return f"{over} you spent {totals}" + (f"; the most at {most}" if most else "") + "."


def _balance(r: dict[str, Any]) -> str:
    rows = r.get("balances") or []
    if not rows:
        return "Your balance is zero: there is no money in your account yet."
    parts = []
    for b in rows:
        held = b["amount_minor"] != b["available_minor"]
        parts.append(b["amount"] + (f" ({b['available']} available after pending payments)" if held else ""))
    when = ""
    try:
        dt = parse_iso(r["as_of"])
        when = f" as of {dt.day} {dt.strftime('%b')} {dt.strftime('%H:%M')} UTC"
    except (KeyError, TypeError, ValueError):
        pass
    return f"Your balance{when}: " + "; ".join(parts) + "."


#: How the account agent names a service request's kind to the customer.
REQUEST_WORDS = {"close_account": "close your account", "freeze_account": "freeze your account",
                 "unfreeze_account": "unfreeze your account"}


def _operator_case(r: dict[str, Any]) -> str:
    what = REQUEST_WORDS.get(r.get("kind", ""), "handle your request")
    if r.get("replayed"):
        return f"Your request to {what} is already with our team (reference {r['request_id']})."
    return f"I've passed your request to {what} to our team (reference {r['request_id']})."


#: Account's answer to "cancel that" when no request to our team is open (``withdraw_operator_case`` found none).
ACCOUNT_CANCEL_ANSWER = ("Nothing has been closed or changed on your account: you have no open request with our team "
                         "to withdraw.")


def _withdrawn(r: dict[str, Any]) -> str:
    if not r.get("withdrawn"):
        return ACCOUNT_CANCEL_ANSWER
    what = REQUEST_WORDS.get(r.get("kind", ""), "handle your request")
    return (f"I've withdrawn your request to {what} (reference {r['request_id']}); our team will not act on it, and "
            "nothing has been changed on your account.")


DESK_RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "card_delivery_estimate": _delivery,
    "unfreeze_card": _unfreeze,
    "spending_summary": _spending,
    "account_balance": _balance,
    "request_operator_case": _operator_case,
    "withdraw_operator_case": _withdrawn,
}


def render_desk_tool(tool: str, result: dict[str, Any]) -> str | None:
    """The sentence for an ``ok`` result of one of :data:`DESK_RENDERERS`' tools, or None (not one of them, or a
    refusal: the caller words those)."""
    fn = DESK_RENDERERS.get(tool)
    if fn is None or not result.get("ok"):
        return None
    return fn(result)
