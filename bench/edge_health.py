"""Per-edge health on a seeded home: a few dozen conversations, then ``switchboard stats --edges`` and
``switchboard draw --format png --health`` on it, and the time of the SQL edge tally.

The home gets ``--repeat`` rounds of 30 offline-desk conversations (the embedded model, the demo bank: refunds with and
without a transaction, cards, fees, transfers, a paused refund, …) and, so that the unhealthy patterns are there to
see, a few threads of scripted models: billing and refunds handing a task to each other (the bounce-back guard stops
it and the turn ends in fallback), refunds sending a task back to billing for another reason (a bounce-back the guard
lets through), and refunds asking for an edge the table does not have (refused). Prints the table and writes
``edge-health.png`` into the home.

Run: ``python bench/edge_health.py [--home DIR] [--repeat 2]`` (``python bench/run.py edges``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: The offline conversations: each a list of customer messages on one thread.
CONVERSATIONS: list[list[str]] = [
    ["Hi, I was charged twice for my coffee this morning and I'd like the money back for the extra one.",
     "Thanks! Where can I see that refund now?", "Another thing: I think I lost my card yesterday."],
    ["I want a refund please"],
    ["I want a refund please", "it was the Uber ride"],
    ["Why was my payment at Steam declined?", "can I get my money back for it?"],
    ["What fees did you charge me?", "refund the ATM fee please"],
    ["Where is my transfer tr_3002?"],
    ["Freeze my card please"],
    ["freeze card ending 4242"],
    ["What is your refund policy?", "ok then refund tx_1009"],
    ["I want a refund for tx_1007 please"],
    ["My card was stolen and there is a payment I don't recognise"],
    ["What's my balance?"],
    ["Close my account please"],
    ["I need to change my address"],
    ["what's the status of refund rf_5001?", "cancel it please", "yes"],
    ["I was charged twice", "the coffee one", "yes please refund it"],
    ["refund me", "I don't know which one", "the Tesco one"],
    ["How long does a new card take to arrive?"],
    ["Why is tx_1009 pending?", "ok and can you refund it"],
    ["I think someone used my card, freeze it and refund the Steam payment"],
    ["what does my spending look like this month?"],
    ["hello"],
    ["can you tell me the weather"],
    ["my transfer to Charles hasn't arrived", "it was tr_3001"],
    ["I want my money back for the Amazon order"],
    ["Was I charged a fee for the ATM withdrawal?", "I want that refunded"],
    ["unfreeze my card"],
    ["I lost my virtual card"],
    ["What is the policy on disputed payments?", "then dispute the Uber payment"],
    ["I want a refund for tx_1001 please, that Tesco order never happened"],
]


def _sent_back_model():
    """triage -> billing -> refunds; refunds sends the task back to billing for another reason ("explain the charge
    first": accepted, the bounce-back guard only stops a return for the same reason); billing answers."""
    from langchain_core.messages import AIMessage

    from nodes.testing.scripted import ScriptedChatModel, tool_call

    def policy(agent, user, names, i, msgs):
        seen = "\n".join(str(m.content) for m in msgs)
        if agent == "triage":
            return AIMessage(content="", tool_calls=[tool_call("transfer_to_billing", reason="a charge")])
        if agent == "billing" and "explain the charge first" not in seen:
            return AIMessage(content="", tool_calls=[tool_call("transfer_to_refunds", reason="wants the money back",
                                                               facts={"transaction_id": "tx_1008"})])
        if agent == "refunds":
            return AIMessage(content="", tool_calls=[tool_call("transfer_to_billing",
                                                               reason="explain the charge first")])
        return AIMessage(content="tx_1008 is the second charge of the same coffee; it can be refunded.")

    return ScriptedChatModel(policy=policy)


def seed(home: Path, repeat: int) -> int:
    """Run the conversations into ``home`` (made afresh); returns the number of threads."""
    from checkpoints import open_checkpointer
    from checkpoints.business import open_store
    from graph import RunContext, Settings, build_graph
    from graph.conversation import Conversation
    from nodes.testing.scripted import KeywordRouter, always_illegal, ping_pong

    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    settings = Settings.from_env(model="offline", db=home / "switchboard.db", business_db=home / "business.db")
    saver = open_checkpointer(settings.db)
    store = open_store(settings.business_db)
    offline = build_graph(checkpointer=saver, settings=settings, store=store)
    threads = 0
    for r in range(repeat):
        for i, messages in enumerate(CONVERSATIONS):
            who = RunContext(user_id="c_bob" if (i + r) % 5 == 0 else "c_ada", tenant_id="t_demo")
            conv = Conversation(f"c{r}-{i}", graph=offline, settings=settings, context=who)
            for text in messages:
                conv.send(text)
            threads += 1
    ada = RunContext(user_id="c_ada", tenant_id="t_demo")
    scripted = [("pingpong", ping_pong("billing", "refunds"), ["I was charged twice for my coffee"]),
                ("sentback", _sent_back_model(), ["refund my coffee, I was charged twice"]),
                ("illegal", always_illegal("account", "refunds"), ["refund and close my account"])]
    for name, model, messages in scripted:
        g = build_graph(model=model, checkpointer=saver, settings=settings, store=store, router=KeywordRouter())
        for k in range(2 * repeat):
            conv = Conversation(f"{name}-{k}", graph=g, settings=settings, context=ada)
            for text in messages:
                conv.send(text)
            threads += 1
    return threads


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=None, help="the home to seed (made afresh; default a temp folder)")
    ap.add_argument("--repeat", type=int, default=1 if os.environ.get("SWITCHBOARD_BENCH_SMOKE") else 2,
                    help="rounds of the 30 offline conversations (default 2)")
    args = ap.parse_args()
    home = args.home or Path(tempfile.mkdtemp()) / "home"
    threads = seed(home, args.repeat)
    env = {**os.environ, "SWITCHBOARD_HOME": str(home), "PYTHONPATH": str(REPO), "COLUMNS": "150"}
    cli = [sys.executable, "-m", "graph.app.cli"]
    subprocess.run([*cli, "operators", "add", "ida", "--tenant", "t_demo", "--role", "admin"], env=env, check=True,
                   capture_output=True)
    print(f"{threads} threads in {home}")
    subprocess.run([*cli, "stats", "--edges", "--as", "ida"], env=env, check=True)
    subprocess.run([*cli, "draw", "--format", "png", "--health", "--out", str(home / "edge-health.png"), "--as", "ida"],
                   env=env, check=True)
    from checkpoints.event_log import open_event_log

    log = open_event_log(home / "switchboard.db")
    events = len(log.events())
    t0 = time.perf_counter()
    log.edge_tally()
    print(f"edge tally over {events} events: {(time.perf_counter() - t0) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
