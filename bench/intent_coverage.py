"""How many of the desk's 97 request kinds get their own answer end to end.

Each request of ``tests/nodes/test_intents.py`` (one per BANKING77 intent and CLINC150 desk intent, our own sentences) runs
on a new thread through the compiled graph with the offline model and the shipped router. A request counts as served
specifically when the agent that owns its intent (``../shared/data/*/agent_map.json`` / ``desk_map.json``) answers
and no request of a *different* intent got the same answer text (request reference ids masked). Not a speed figure:
it is here because it runs the whole graph 97 times.

    python bench/intent_coverage.py [-v]
"""

from __future__ import annotations

import collections
import os
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main(verbose: bool = False) -> int:
    os.environ["SWITCHBOARD_HOME"] = tempfile.mkdtemp(prefix="switchboard-intents-")
    from langgraph.checkpoint.memory import InMemorySaver

    from graph.builder import build_desk
    from graph.conversation import Conversation
    from nodes.embedded.desk_knowledge import load_knowledge
    from tests.nodes.test_intents import ROWS, _owners

    b77, clinc = _owners()
    owner = {**b77, **clinc}
    knowledge = load_knowledge()
    desk = build_desk(checkpointer=InMemorySaver())
    out = []
    for n, (label, text) in enumerate(ROWS):
        r = Conversation(f"intent-{n}", desk=desk).send(text)
        key = knowledge.by_label(label).key  # type: ignore[union-attr]
        out.append((label, key, owner[label], r.agent, re.sub(r"\bsr_\w+", "sr_X", r.text or "")))
    by_answer: dict[str, set[str]] = collections.defaultdict(set)
    for _, key, _, _, answer in out:
        by_answer[answer].add(key)
    specific = 0
    for label, key, own, agent, answer in out:
        ok = agent == own and not (by_answer[answer] - {key})
        specific += ok
        if verbose and not ok:
            print(f"  not specific: {label} (owner {own}, answered by {agent}): {answer[:100]}")
    by_owner = sum(agent == own for _, _, own, agent, _ in out)
    print(f"requests: {len(out)}   answered by the owning agent: {by_owner}   own specific answer: {specific}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main("-v" in sys.argv[1:]))
