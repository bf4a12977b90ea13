"""The transcript reducer and the DeltaChannel of graph/contracts/state.py give LangGraph's own results on long threads
at a cost that does not grow with the thread: ``messages_reducer`` is ``add_messages`` folded write by write (replace
by id, RemoveMessage, REMOVE_ALL_MESSAGES, ids filled in, an unknown removal refused), ``FoldingDeltaChannel``
continues its last replay, and ``fold_prefix`` is the full fold."""

from __future__ import annotations

import copy
import random

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.channels import DeltaChannel
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages

from graph.contracts.state import FoldingDeltaChannel, append_batch, fold_prefix, messages_reducer


def _fold(state, writes):
    for w in writes:
        state = add_messages(state, w)
    return state


def _view(messages):
    """(type, id, content) with generated ids masked (a message written without an id gets a random one)."""
    return [(type(m).__name__, m.id if len(str(m.id)) < 30 else "<new>", m.content) for m in messages]


def test_new_messages_are_appended_without_changing_the_input():
    state = [HumanMessage("hi", id="h1"), AIMessage("hello", id="a1")]
    before = list(state)
    out = messages_reducer(state, [[HumanMessage("more", id="h2")], [AIMessage("sure", id="a2")]])
    assert [m.id for m in out] == ["h1", "a1", "h2", "a2"] and state == before and out is not state
    # the next turn continues from the returned list (its kept index), the earlier list is left as it was
    again = messages_reducer(out, [[HumanMessage("third", id="h3")]])
    assert [m.id for m in again] == ["h1", "a1", "h2", "a2", "h3"] and len(out) == 4


def test_replace_by_id_remove_and_remove_all_as_add_messages():
    base = [HumanMessage("hi", id="h1"), AIMessage("hello", id="a1"), HumanMessage("x", id="h2")]
    out = messages_reducer(list(base), [[AIMessage("hello again", id="a1")]])
    assert _view(out) == _view(_fold(list(base), [[AIMessage("hello again", id="a1")]]))
    assert [m.content for m in out] == ["hi", "hello again", "x"]
    out = messages_reducer(out, [[RemoveMessage(id="h2")], [HumanMessage("y", id="h3")]])
    assert [m.id for m in out] == ["h1", "a1", "h3"]
    assert messages_reducer(out, [[RemoveMessage(id=REMOVE_ALL_MESSAGES), HumanMessage("z", id="h9")]]) == \
        [HumanMessage("z", id="h9")]
    with pytest.raises(ValueError, match="doesn't exist"):
        messages_reducer(out, [[RemoveMessage(id="nope")]])
    # a repeated id inside one write, and a message without id, go through add_messages
    twice = messages_reducer(out, [[AIMessage("p", id="n1"), AIMessage("q", id="n1")], [AIMessage("no id")]])
    assert _view(twice) == _view(_fold(list(out), [[AIMessage("p", id="n1"), AIMessage("q", id="n1")],
                                                   [AIMessage("no id")]]))


def test_randomised_writes_fold_as_add_messages_also_when_split_and_continued():
    rng = random.Random(7)
    for _ in range(400):
        ids = [f"i{k}" for k in range(6)]
        state = [HumanMessage(f"s{k}", id=f"i{k}") for k in range(rng.randint(0, 4))]
        writes = []
        for _ in range(rng.randint(1, 5)):
            w = []
            for _ in range(rng.randint(1, 3)):
                r = rng.random()
                if r < 0.5:
                    w.append(AIMessage(f"a{rng.random():.3f}", id=rng.choice([*ids, f"n{rng.random()}"])))
                elif r < 0.6:
                    w.append(RemoveMessage(id=rng.choice(ids)))
                elif r < 0.63:
                    w.append(RemoveMessage(id=REMOVE_ALL_MESSAGES))
                elif r < 0.7:
                    w.append(AIMessage("no id"))
                else:
                    w.append(HumanMessage(f"h{rng.random():.3f}", id=f"n{rng.random()}"))
            writes.append(w)
        try:
            expected = _view(_fold(list(state), copy.deepcopy(writes)))
        except ValueError:
            with pytest.raises(ValueError):
                messages_reducer(list(state), copy.deepcopy(writes))
            continue
        ws = copy.deepcopy(writes)
        k = rng.randint(0, len(ws))
        first = messages_reducer(state, ws[:k]) if k else state
        assert _view(messages_reducer(first, ws[k:]) if ws[k:] else first) == expected
        assert _view(messages_reducer(state, ws)) == expected


def _channel(cls, reducer, key="messages"):
    ch = cls(reducer, list, snapshot_frequency=1000)
    ch.key = key
    return ch


def test_folding_channel_continues_its_last_replay_with_langgraphs_result():
    seed = [HumanMessage("s", id="s1")]
    writes = [("t", "messages", [HumanMessage(f"h{i}", id=f"h{i}")]) for i in range(5)]
    calls = []

    def counting(state, ws):
        calls.append(len(ws))
        return messages_reducer(state, ws)

    first = _channel(FoldingDeltaChannel, counting).from_checkpoint(seed)
    first.replay_writes(writes[:3])
    again = _channel(FoldingDeltaChannel, counting).from_checkpoint(seed)
    again.replay_writes(writes)  # the same seed and write objects, two more at the end
    plain = _channel(DeltaChannel, messages_reducer).from_checkpoint(seed)
    plain.replay_writes(writes)
    assert again.get() == plain.get() and calls == [3, 2]  # only the two new writes were reduced
    other = _channel(FoldingDeltaChannel, counting).from_checkpoint(seed)
    other.replay_writes([("t", "messages", [HumanMessage("h0", id="h0")]), *writes[1:]])  # a different first write
    assert other.get() == plain.get() and calls[-1] == 5


def test_folding_channel_keeps_overwrite_and_append_lists():
    from langgraph.types import Overwrite

    seed: list = []
    writes = [("t", "path", [{"n": 1}]), ("t", "path", Overwrite([{"n": 0}])), ("t", "path", [{"n": 2}])]
    ch = _channel(FoldingDeltaChannel, append_batch, "path").from_checkpoint(seed)
    ch.replay_writes(writes[:1])
    ch2 = _channel(FoldingDeltaChannel, append_batch, "path").from_checkpoint(seed)
    ch2.replay_writes(writes)
    ref = _channel(DeltaChannel, append_batch, "path").from_checkpoint(seed)
    ref.replay_writes(writes)
    assert ch2.get() == ref.get() == [{"n": 0}, {"n": 2}]


def test_fold_prefix_continues_only_over_the_same_objects():
    seen: list[int] = []

    def step(acc: list, x: object) -> None:
        seen.append(1)
        acc.append(x)

    items = [object() for _ in range(5)]
    assert fold_prefix("t", items[:3], list, step, list) == items[:3]
    assert fold_prefix("t", items, list, step, list) == items and len(seen) == 5  # 3, then the 2 new ones
    changed = [items[0], object(), *items[2:]]
    assert fold_prefix("t", changed, list, step, list) == changed and len(seen) == 10  # not a prefix: from the start
