"""System prompts of the agents. The first line names the agent (a model that reads text, such as an OpenAI model or
the scripted test doubles, learns its role there; the embedded model gets a typed ``graph.contracts.brief.ModelBrief``)."""

from __future__ import annotations

import re

__all__ = ["system_prompt", "agent_from_prompt", "DESCRIPTIONS"]

#: One line per agent: what it owns. Used in prompts and in handoff tool descriptions.
DESCRIPTIONS: dict[str, str] = {
    "triage": "routes each request to the one specialist who owns it; never answers business questions itself",
    "billing": "charges, fees, exchange rates, pending/declined/duplicate payments, unrecognised transactions",
    "refunds": "refund requests and the status of refunds",
    "cards": "card delivery, activation, PIN, lost or stolen cards, freezing cards, virtual cards, Apple/Google Pay",
    "transfers": "sending and receiving money, transfer status, beneficiaries, top-ups",
    "account": "identity verification, personal details, passcode, opening and closing the account",
    "policy": "general rules: fees, limits, supported countries and currencies, age requirements",
    "clarify": "asks the customer what they need when the request is unclear",
    "supervisor": "splits compound requests, calls experts as tools, and writes one merged answer",
}

_AGENT_RE = re.compile(r"^You are the (\w+) agent", re.M)


def system_prompt(agent: str, structured_routing: bool = False) -> str:
    """The system prompt of ``agent`` (str). The first line is ``You are the <agent> agent …``.

    ``structured_routing``: triage decides with the ``route_to_agent`` tool (a RouteDecision) instead of the
    ``transfer_to_*`` tools; the prompt says so."""
    if structured_routing:
        return (
            f"You are the {agent} agent of a bank's customer-support desk. You own: {DESCRIPTIONS.get(agent, agent)}.\n"
            "Decide with the route_to_agent tool: target = the one agent that owns the request (clarify when it is"
            " unclear), confidence between 0 and 1, a one-sentence reason, and in extracted the facts the customer"
            " stated (e.g. merchant, amount, date, transaction_id), as text. Never invent facts. If a result says"
            " 'Refused', route again differently."
        )
    return (
        f"You are the {agent} agent of a bank's customer-support desk. You own: {DESCRIPTIONS.get(agent, agent)}.\n"
        "Use your tools to look things up before answering; never invent transactions, amounts or ids.\n"
        "If the request belongs to another agent, call the matching transfer_to_<agent> tool with a short reason;"
        " only one transfer per message. If a tool result says 'Refused', do not retry the same call: answer or ask"
        " the customer. Answer briefly and concretely, naming the records you found."
    )


def agent_from_prompt(text: str) -> str | None:
    """The agent named on a system prompt's first line, or None."""
    m = _AGENT_RE.search(text or "")
    return m.group(1) if m else None
