"""Model-input size of one agent over a long thread, with and without the input budget.

A 200-turn thread in which refunds keeps the conversation (a scripted model: triage hands over once, refunds answers
every turn with a different text); prints items, characters and estimated tokens (``policies.history.estimate_tokens``)
of refunds' model input at turns 10, 100 and 200, unbounded and with the default budget
(``Settings.max_input_tokens``). Exit 1 when a bounded input exceeds the budget.

Usage: ``python bench/context_budget.py [--turns 200]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    """Run the thread twice and print one line per budget."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args(argv)
    os.environ["SWITCHBOARD_HOME"] = tempfile.mkdtemp(prefix="sb-context-")
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from graph.builder import build_desk
    from graph.contracts.settings import Settings
    from graph.conversation import Conversation
    from nodes.testing.scripted import KeywordRouter, ScriptedChatModel, tool_call
    from policies.history import estimate_tokens

    filler = "the parcel came late, the box was open and the receipt shows the evening order from the shop "

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[tool_call("transfer_to_refunds", reason="a refund question")])
        return AIMessage(content=f"Noted ({i}): {user[:60]}. " + filler * 2)

    default = Settings().max_input_tokens
    worst = 0
    for budget in (None, default):
        model = ScriptedChatModel(policy=policy)
        settings = Settings(max_input_tokens=budget or 10**9)
        desk = build_desk(model=model, checkpointer=InMemorySaver(), settings=settings, router=KeywordRouter())
        conv = Conversation("long", desk=desk)
        conv.send("I'd like a refund for tx_1001 please")
        for n in range(2, args.turns + 1):
            conv.send(f"About the refund, one more detail number {n}: " + filler)
        calls = [msgs for agent, msgs in model.log if agent == "refunds"]
        marks = [t for t in (10, 100, 200) if t <= len(calls)]
        sizes = {t: (len(calls[t - 1]), sum(len(str(m.content)) for m in calls[t - 1]), estimate_tokens(calls[t - 1]))
                 for t in marks}
        if budget:
            worst = max(estimate_tokens(m) for m in calls)
        label = f"budget {budget} tokens" if budget else "unbounded"
        print(f"{label}: " + "; ".join(f"turn {t}: {n} items, {c} chars, ~{k} tokens" for t, (n, c, k) in sizes.items()))
    return 0 if worst <= default else 1


if __name__ == "__main__":
    raise SystemExit(main())
