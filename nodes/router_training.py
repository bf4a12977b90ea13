"""Training a router on a user's data safely (``switchboard train-router``): keep the desk's own classes, measure on
held-out data beside the shipped router, and say whether the new router is worse.

Steps (:func:`train_with_holdout`):

1. **Merge** the desk's conversational and out-of-scope examples (the shipped ``router_examples.csv`` rows of agent
   ``other``: greetings, thanks, goodbyes, off-topic, gibberish) into the user's data, under labels prefixed
   ``desk_other:``, unless the user's label map already sends some label to ``other`` (their data has its own).
   Without them a router trained on BANKING77 sends "hi" or "thanks, that's all" to a specialist.
2. **Split** the user's rows into train and held-out, stratified per label, :data:`HELD_OUT_FRACTION` held out
   (deterministic: ``random.Random(SPLIT_SEED)``; a label with one example stays in train).
3. **Fit** a measuring candidate on the train part plus the merged desk rows.
4. **Measure** both that candidate and the shipped router on the same data: agent accuracy on the held-out split,
   and the share of ``nodes/data/router_holdout.csv`` (project-written conversational and out-of-scope sentences
   that neither router was trained on) routed to ``other``.
5. The candidate is **worse** when either figure is below the shipped router's (strictly); the CLI then refuses to
   install it unless ``--force``.
6. **Refit** the same pipeline on *all* the user's rows plus the merged desk rows: that is the router returned and
   installed; skipped when the candidate is worse and the caller will not install it anyway (``refit_if_worse=False``,
   what ``train-router`` without ``--force`` passes: a refused router costs one fit, not two). The held-out rows
   would otherwise be lost to it (on BANKING77 + CLINC150 train, 80% -> 100% of the
   rows raises bare BANKING77 test accuracy 0.963 -> 0.970).  The figures of step 4 stay those of the 80% fit, the
   only fair comparison with the shipped router on rows neither was trained on; the final fit is measured on no
   held-out data (``TrainingReport.n_final``).
"""

from __future__ import annotations

import csv
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodes.router import OTHER, IntentRouter, default_router, read_router_examples

__all__ = ["HELD_OUT_FRACTION", "SPLIT_SEED", "DESK_PREFIX", "HOLDOUT_PATH", "HeldOutFigures", "TrainingReport",
           "merge_desk_classes", "split_held_out", "read_holdout", "measure", "train_with_holdout"]

#: Share of the user's rows held out for the comparison (per label).
HELD_OUT_FRACTION = 0.2
#: Seed of the split, so a re-run measures the same rows.
SPLIT_SEED = 13
#: Prefix of the desk's merged labels (keeps them apart from the user's label names).
DESK_PREFIX = "desk_other:"
#: Project-written conversational/out-of-scope sentences, not in any training file (columns ``text,agent``).
HOLDOUT_PATH = Path(__file__).resolve().parent / "data" / "router_holdout.csv"


@dataclass(frozen=True)
class HeldOutFigures:
    """One router's figures on held-out data: ``accuracy`` = share of the ``n_held_out`` held-out user rows routed to
    their agent; ``other_recall`` = share of the ``n_other`` conversational/out-of-scope sentences routed to ``other``.
    Both 0..1."""

    accuracy: float
    n_held_out: int
    other_recall: float
    n_other: int


@dataclass(frozen=True)
class TrainingReport:
    """What ``train_with_holdout`` did: ``candidate`` (the measuring fit) and ``shipped`` figures on the same data,
    ``n_train`` rows of the measuring fit (user train part + merged desk rows), ``n_final`` rows of the returned
    router's fit (all the user's rows + merged desk rows), ``merged_desk_rows`` (0 when the user's data had its own
    ``other`` labels), and ``worse_on``: the figures (``"held-out accuracy"``, ``"conversational/out-of-scope"``)
    where the candidate is below the shipped router."""

    candidate: HeldOutFigures
    shipped: HeldOutFigures
    n_train: int
    merged_desk_rows: int
    worse_on: tuple[str, ...]
    n_final: int = 0
    #: Why the measuring fit / the refitted router has no embedding head (``nodes.router_fit.head_skip_reason``),
    #: None when it has one; they can differ (1,931 rows measured, 2,162 refitted).
    candidate_no_head: str | None = None
    final_no_head: str | None = None
    #: Whether step 6 ran: False when the candidate was worse and ``refit_if_worse=False`` (then ``n_final`` is 0,
    #: ``final_no_head`` None and no router was returned).
    refitted: bool = True


def merge_desk_classes(texts: list[str], labels: list[str], label_to_agent: dict[str, str],
                       examples: Path | None = None) -> tuple[list[str], list[str], dict[str, str], int]:
    """The user's rows plus the shipped examples of agent ``other`` (labels ``desk_other:<topic>``), unless
    ``label_to_agent`` already maps a label to ``other``. Returns ``(texts, labels, label_to_agent, n_added)``; the
    inputs are not modified. Raises ``InputError`` when the shipped examples file is malformed."""
    if OTHER in set(label_to_agent.values()):
        return list(texts), list(labels), dict(label_to_agent), 0
    ex_texts, ex_topics, topic_to_agent = read_router_examples(examples)
    add = [(t, f"{DESK_PREFIX}{topic}") for t, topic in zip(ex_texts, ex_topics) if topic_to_agent[topic] == OTHER]
    mapping = dict(label_to_agent)
    mapping.update({label: OTHER for _, label in add})
    return list(texts) + [t for t, _ in add], list(labels) + [label for _, label in add], mapping, len(add)


def split_held_out(labels: list[str], fraction: float = HELD_OUT_FRACTION,
                   seed: int = SPLIT_SEED) -> tuple[list[int], list[int]]:
    """Row indices ``(train, held_out)``: per label, ``round(n * fraction)`` rows held out (at most ``n - 1``),
    chosen by ``random.Random(seed)``; both lists sorted."""
    by_label: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        by_label.setdefault(label, []).append(i)
    rng = random.Random(seed)
    train: list[int] = []
    held: list[int] = []
    for label in sorted(by_label):
        rows = by_label[label]
        rng.shuffle(rows)
        k = min(round(len(rows) * fraction), len(rows) - 1)
        held += rows[:k]
        train += rows[k:]
    return sorted(train), sorted(held)


def read_holdout(path: Path = HOLDOUT_PATH) -> tuple[list[str], list[str]]:
    """``(texts, agents)`` of the conversational/out-of-scope hold-out file (``text,agent``)."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [(r["text"].strip(), r["agent"].strip()) for r in csv.DictReader(fh) if (r.get("text") or "").strip()]
    return [t for t, _ in rows], [a for _, a in rows]


def _share(router: IntentRouter, texts: list[str], agents: list[str]) -> float:
    if not texts:
        return 0.0
    routes = router.route_many(texts)
    return sum(r.agent == a for r, a in zip(routes, agents)) / len(texts)


def measure(router: IntentRouter, texts: list[str], agents: list[str], other_texts: list[str]) -> HeldOutFigures:
    """``router``'s :class:`HeldOutFigures` on held-out ``texts`` (expected ``agents``) and ``other_texts``."""
    return HeldOutFigures(accuracy=_share(router, texts, agents), n_held_out=len(texts),
                          other_recall=_share(router, other_texts, [OTHER] * len(other_texts)), n_other=len(other_texts))


def train_with_holdout(texts: list[str], labels: list[str], label_to_agent: dict[str, str], *,
                       shipped: IntentRouter | None = None, data_sha256: str | None = None,
                       step: Callable[[str], None] | None = None,
                       refit_if_worse: bool = True) -> tuple[IntentRouter | None, TrainingReport]:
    """Merge, split, fit, measure and refit (module doc). ``shipped``: the router to compare with (default: the
    shipped default); ``step(description)`` is called as each stage starts (for a progress display);
    ``refit_if_worse=False``: stop after the comparison when the candidate is worse (no second fit).

    Returns the router refitted on all the user's rows plus the desk rows (step 6; None when that step was skipped),
    and the report of the measuring fit (steps 3-5: train part only, figures on the held-out part).

    Raises:
        InputError: bad training data (``IntentRouter.fit``) or a malformed examples file.
    """
    say = step or (lambda _d: None)
    say("merging the desk's conversational and out-of-scope examples")
    train_idx, held_idx = split_held_out(labels)
    tr_texts, tr_labels, mapping, added = merge_desk_classes([texts[i] for i in train_idx],
                                                             [labels[i] for i in train_idx], label_to_agent)
    say(f"fitting on {len(tr_texts)} examples")
    candidate = IntentRouter().fit(tr_texts, tr_labels, label_to_agent=mapping, data_sha256=data_sha256)
    say(f"measuring on {len(held_idx)} held-out rows")
    held_texts = [texts[i] for i in held_idx]
    held_agents = [label_to_agent[labels[i]] for i in held_idx]
    other_texts, _ = read_holdout()
    cand = measure(candidate, held_texts, held_agents, other_texts)
    ship = measure(shipped or default_router(), held_texts, held_agents, other_texts)
    worse = tuple(name for name, c, s in (("held-out accuracy", cand.accuracy, ship.accuracy),
                                          ("conversational/out-of-scope", cand.other_recall, ship.other_recall))
                  if c < s)
    from nodes.router_fit import head_skip_reason

    if worse and not refit_if_worse:
        return None, TrainingReport(candidate=cand, shipped=ship, n_train=len(tr_texts), merged_desk_rows=added,
                                    worse_on=worse, candidate_no_head=head_skip_reason(tr_labels), refitted=False)
    all_texts, all_labels, all_mapping, _ = merge_desk_classes(texts, labels, label_to_agent)
    say(f"refitting on all {len(all_texts)} examples")
    final = IntentRouter().fit(all_texts, all_labels, label_to_agent=all_mapping, data_sha256=data_sha256)
    return final, TrainingReport(candidate=cand, shipped=ship, n_train=len(tr_texts), merged_desk_rows=added,
                                 worse_on=worse, n_final=len(all_texts),
                                 candidate_no_head=head_skip_reason(tr_labels), final_no_head=head_skip_reason(all_labels))
