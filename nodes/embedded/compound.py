"""Compound-request detection: does one message hold several independent kinds of work?

Triage chooses between a handoff (one intent: control moves to the specialist that owns it) and supervisor
mode (several intents: the supervisor calls one expert per intent as a tool and answers once).  The rule
is: **more than one expert intent above a confidence threshold**, where the intents are read from the router's
per-agent probabilities of each *request segment* of the message (:func:`split_requests`): a segment's intent
is its most probable expert, if that probability reaches the threshold.

One segment contributes at most one intent.  Two experts with similar probabilities for the *same* segment is
ambiguity about who owns one request, not two requests: "I was charged twice for my coffee and I'd like the
money back for the extra one" routes billing 0.45 / refunds 0.46 with the shipped router — one piece of work
that needs billing's finding before refunds can act, i.e. a handoff chain, not parallel experts.

Pure functions over plain data: the caller routes the segments (``nodes``) and passes the scores here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.edges import EXPERTS

__all__ = ["COMPOUND_THRESHOLD", "UNMARKED_THRESHOLD", "WHOLE_SURE", "MIN_SEGMENT_WORDS", "CompoundDecision", "split_requests",
           "split_marked", "asks_something", "continues_previous", "detect_compound"]

#: Minimum router probability for a segment's best expert to count as an intent.  Measured with
#: ``bench/compound_detection.py`` (the shipped router as of this change, BANKING77 test set, 1000 two-agent
#: pairs): 0.3 -> 7.5% of single queries falsely compound / 71% of pairs detected (before the short-fragment
#: rule); 0.4 -> 4.0% / 68%; 0.5 -> 2.2% / 62%.  A false compound costs more than a miss (a miss still goes to
#: one specialist by handoff, the established path), so the default favours precision.
COMPOUND_THRESHOLD = 0.5

#: When no segment the message itself marks as *another* request (:func:`split_marked`: "Also, …", ", and when …")
#: brings the second expert — the segments are only sentences — every expert's best segment score must reach this
#: for the message to be compound: several sentences usually describe one problem ("I want to top up my account.
#: Can I do it with my phone?"), so a plain sentence break needs more evidence than an explicit "also". Chosen on
#: BANKING77 train.csv, never on test: ``python bench/merged_training_set.py OUT --holdout 2000``, ``switchboard
#: train-router OUT/train.csv --labels OUT/labels.json --out OUT/router.npz --force``, then ``python
#: bench/compound_detection.py --router OUT/router.npz --csv OUT/heldout.csv --unmarked U`` (U = 0.5 is the rule
#: without this threshold): false compounds on the 2,000 held-out singles 8 / 5 / 2 / 0 for U = 0.5 / 0.6 / 0.7 / 0.8;
#: "<a>. Also, <b>" pairs detected 80.0 / 79.8 / 79.6 / 79.5%; plain "<a>. <b>" pairs 47.0 / 43.7 / 37.9 / 31.9%.
#: A false compound costs more than a miss (see :data:`COMPOUND_THRESHOLD`).
UNMARKED_THRESHOLD = 0.7

#: When the router is at least this sure of one expert for the *whole* message and that expert is one of the
#: segments' intents, a message whose further request is not marked ("Also, …") is one request: a customer who
#: describes one problem in several sentences ("I need to change my PIN. Can I do that at a cash machine?") gives
#: the whole text a confident topic, while two unrelated requests split the whole text's probability. Chosen on
#: BANKING77 train.csv, never on test, with the held-out split of :data:`UNMARKED_THRESHOLD`: ``python
#: bench/compound_detection.py --router OUT/router.npz --csv OUT/heldout.csv --whole W``. See the figures in
#: ``WHOLE_SURE_FIGURES`` below the constant.
WHOLE_SURE = 0.9

#: A fragment with fewer words than this ("Why?", "Hi.", "Thanks.", "Any ideas why?") is not a request of its own:
#: it joins the segment before it (or after it, when it opens the message).  Measured with the shipped router on
#: BANKING77 single queries: such fragments route with high confidence to an arbitrary agent ("Why?" -> account
#: 0.75) and were the most frequent cause of a false compound.
MIN_SEGMENT_WORDS = 4

_SENTENCE_END = re.compile(r"(?<=[.?!;])\s+")
# A coordination that opens a second request: ", and when …", " and can you also …", " but why …", " also, …".
_SECOND_REQUEST = re.compile(
    r",?\s+(?:and|but|plus|also)\s*,?\s+(?:also\s+)?"
    r"(?=(?:when|where|why|how|what|which|who|can|could|will|would|is|are|was|were|do|does|did|has|have|"
    r"should|please|i\s+also|also)\b)",
    re.IGNORECASE,
)
_WORD = re.compile(r"\w+")
# A segment that asks or requests something: a question mark, or a question/request word ("can", "how", "I need",
# "please", "help", ...). The project's own list, chosen on BANKING77 train.csv single queries (see
# :func:`asks_something`).
_ASKS = re.compile(
    r"\?|\b(?:can|could|would|will|please|how|what|why|when|where|which|who|is there|are there|do i|does|did|"
    r"i want|i need|i'?d like|i would like|help|also|tell me|let me|want to|need to|should)\b",
    re.IGNORECASE,
)
# An explicit marker that the segment opens another request ("Also, …", "One more thing: …").
_ANOTHER = re.compile(r"(?:also|and also|plus|another thing|one more thing|secondly|second)\b", re.IGNORECASE)


def split_requests(text: str) -> list[str]:
    """Split a message into request segments.

    Boundaries: sentence ends (``. ? ! ;`` followed by white space) and a coordination that opens a new
    question or request (``", and when …"``, ``" and can you …"``, ``" but why …"``, ``" and also …"``).
    A plain ``"… and I'd like the money back for it"`` is *not* split: such a clause usually depends on the
    first one (it refers back to it), so it stays one request and goes through handoffs.  A fragment of fewer
    than :data:`MIN_SEGMENT_WORDS` words joins its neighbour.

    Args:
        text: the user's message (any length; str).

    Returns:
        Non-empty, stripped segments in message order (``[]`` for blank text); segments without a word
        character (stray punctuation) are dropped.  Source of the rule: this project (no dataset text).
    """
    return [seg for seg, _ in split_marked(text)]


def split_marked(text: str) -> list[tuple[str, bool]]:
    """:func:`split_requests` with, per segment, whether the message marks it as *another* request: it was split
    off at a coordination that opens a new question (``", and when …"``, ``" and can you also …"``) or opens with an
    explicit marker (``"Also, …"``, ``"One more thing: …"``). The first segment is never marked; a segment that
    follows a plain sentence end is not marked (several sentences often describe one problem), nor one split off at
    ``", but …"`` (a contrast about the same matter: "I want a refund, but should I cancel the payment instead?";
    one of the compound losses of ``bench/route_losses.py --list`` on held-out BANKING77 train rows;
    with :func:`continues_previous`, false compounds on those 2,000 rows 3 -> 2, pair detection unchanged).

    Returns:
        ``[(segment, marked), ...]`` in message order, the segments of :func:`split_requests`.
    """
    parts: list[tuple[str, bool]] = []
    for sentence in _SENTENCE_END.split(text or ""):
        start, opened_by = 0, None  # opened_by: the coordination before the part (None for a sentence's first part)
        for cut in [*_SECOND_REQUEST.finditer(sentence), None]:
            part = sentence[start:cut.start() if cut else len(sentence)].strip(" ,")
            if _WORD.search(part):
                # ", but how …" usually asks about the same matter (a contrast), not another request
                by_but = opened_by is not None and opened_by.strip(" ,").lower().startswith("but")
                parts.append((part, (opened_by is not None and not by_but) or bool(_ANOTHER.match(part))))
            if cut:
                start, opened_by = cut.end(), cut.group(0)
    out: list[tuple[str, bool]] = []
    carry, carry_marked = "", False
    for part, marked in parts:
        if len(_WORD.findall(part)) < MIN_SEGMENT_WORDS:
            if out:
                out[-1] = (f"{out[-1][0]} {part}", out[-1][1])
            else:
                carry, carry_marked = f"{carry} {part}".strip(), carry_marked or marked
            continue
        out.append((f"{carry} {part}".strip(), (carry_marked or marked) and bool(out)))
        carry, carry_marked = "", False
    if carry:
        out.append((carry, carry_marked and bool(out)))
    return out


def asks_something(segments: Sequence[str]) -> list[bool]:
    """Per segment of :func:`split_requests`: does it ask for something (a question or a request), or is it only
    context ("I just transferred some money.", "It was very embarrassing.")?  A segment asks when it has a question
    mark or a question/request word, or when the next segment opens with an explicit "also" / "one more thing"
    (then it is the first of several requests even when worded as a statement: "My card was declined. Also, …").

    Only asking segments carry an intent in compound detection: a context statement routes to some agent with high
    confidence and was the main cause of false compounds.  Measured with the shipped router of the time on 3,000
    BANKING77 train.csv single queries and 600 two-agent pairs ("<a>. Also, <b>", seed 7): false compounds 71 -> 21,
    pairs detected with exactly their two experts 339 -> 319; with the router of this change on the test set
    (``python bench/compound_detection.py``): 0.6% false compounds, 53.5% of pairs detected.

    Args:
        segments: request segments in message order.

    Returns:
        One bool per segment, same order.
    """
    nxt = list(segments[1:]) + [""]
    return [bool(_ASKS.search(seg) or _ANOTHER.match(after.strip())) for seg, after in zip(segments, nxt)]


# A pronoun among a segment's first words that points back at what the message said before ("Can I do this even
# though …", "Is it normal that mine is still pending?").
_REFERS_BACK = re.compile(r"^\W*(?:\w+\W+){0,3}?(?:this|that|it|mine|these|those|them)\b", re.IGNORECASE)


def continues_previous(split: Sequence[tuple[str, bool]]) -> list[bool]:
    """Per segment of :func:`split_marked`: does it continue the request before it rather than open one of its own?
    True for a segment after the first that the message does not mark as another request and that points back with a
    pronoun among its first four words ("I need to change my PIN while I'm abroad. Can I do this from another country?"
    is one request about the PIN). Such a segment carries no intent of its own in compound detection, as a context
    statement (:func:`asks_something`): two of the five compound losses of ``bench/route_losses.py --list`` on
    held-out BANKING77 train rows were such follow-on sentences. Measured on those 2,000 held-out rows
    (``python bench/compound_detection.py --router R --csv heldout.csv``, R fitted on the rest of BANKING77 train +
    CLINC150 train; never the test set): false compounds 5 -> 3; "<a>. Also, <b>" pairs detected 83.4 -> 83.3%;
    plain "<a>. <b>" pairs 36.6 -> 34.0% (a second query that opens with "it"/"this" reads as a follow-on there).

    Returns:
        One bool per segment, same order; the first is always False.
    """
    return [k > 0 and not marked and bool(_REFERS_BACK.match(seg)) for k, (seg, marked) in enumerate(split)]


@dataclass(frozen=True)
class CompoundDecision:
    """The outcome of :func:`detect_compound`.

    Attributes:
        compound: True when the segments' intents name at least two distinct experts.
        experts: those experts, in order of first appearance (segment order), no duplicates.
        segment_experts: per input segment, its intent as a 0- or 1-tuple (the best expert at or above the
            threshold).
        scores: per expert in ``experts``, its highest score over the segments (0..1).
        reason: one line for the triage handoff reason / events, e.g. ``"compound: billing 0.90, refunds 0.85"``.
    """

    compound: bool
    experts: tuple[str, ...]
    segment_experts: tuple[tuple[str, ...], ...]
    scores: Mapping[str, float]
    reason: str

    def objectives(self, segments: Sequence[str]) -> dict[str, str]:
        """Per expert, the text of its segments joined with a space (the expert's sub-task), in ``experts`` order.

        Raises:
            ValueError: ``segments`` does not have one entry per scored segment.
        """
        if len(segments) != len(self.segment_experts):
            raise ValueError(f"{len(segments)} segments given for {len(self.segment_experts)} scored segments")
        out: dict[str, list[str]] = {e: [] for e in self.experts}
        for seg, experts in zip(segments, self.segment_experts):
            for e in experts:
                out[e].append(seg)
        return {e: " ".join(parts) for e, parts in out.items()}


def detect_compound(
    segment_scores: Sequence[Mapping[str, float]],
    threshold: float = COMPOUND_THRESHOLD,
    experts: Sequence[str] = EXPERTS,
    marked: Sequence[bool] | None = None,
    unmarked_threshold: float = UNMARKED_THRESHOLD,
    whole: Mapping[str, float] | None = None,
    whole_sure: float = WHOLE_SURE,
) -> CompoundDecision:
    """Compound detection: more than one expert intent above ``threshold`` — and, when the message marks none of the
    segments that bring a further expert as another request, every intent at ``unmarked_threshold`` or more.

    Args:
        segment_scores: per request segment (see :func:`split_requests`; the whole message counts as one
            segment when it does not split), the router's probability per agent (keys agent names, values
            0..1; unknown names and non-experts such as ``"other"`` or ``"clarify"`` are ignored).
        threshold: minimum probability for an intent (default :data:`COMPOUND_THRESHOLD`).
        experts: agents that can be called as experts.
        marked: per segment, whether the message marks it as another request (:func:`split_marked`); None (the
            default) applies ``threshold`` alone, as if every segment were marked.
        unmarked_threshold: see :data:`UNMARKED_THRESHOLD` (used only with ``marked``).
        whole: the router's probability per agent for the whole message (None: not used); with ``marked``, an
            unmarked message whose whole text gives one of the intents' experts ``whole_sure`` or more is single
            (:data:`WHOLE_SURE`; the reason says ``"(unmarked, whole message <agent> 0.93)"``).
        whole_sure: see :data:`WHOLE_SURE`, in (0, 1].

    Returns:
        A :class:`CompoundDecision`; ``compound`` is True iff at least two segments have intents (their best
        expert, at or above ``threshold``) naming distinct experts, and — when ``marked`` is given and no marked
        segment's intent differs from the first intent — every intent's score reaches ``unmarked_threshold``
        (otherwise the reason says ``"single request: … (unmarked, below 0.70)"``).  Deterministic: ties in score
        are broken by expert name.

    Raises:
        ValueError: a threshold outside (0, 1], or ``marked`` not of the length of ``segment_scores``.
    """
    if not 0.0 < threshold <= 1.0 or not 0.0 < unmarked_threshold <= 1.0 or not 0.0 < whole_sure <= 1.0:
        raise ValueError(f"thresholds must be in (0, 1], got {threshold}, {unmarked_threshold} and {whole_sure}")
    if marked is not None and len(marked) != len(segment_scores):
        raise ValueError(f"{len(marked)} marks given for {len(segment_scores)} segments")
    allowed = set(experts)
    order: list[str] = []
    best: dict[str, float] = {}
    per_segment: list[tuple[str, ...]] = []
    for scores in segment_scores:
        hits = sorted(((float(p), a) for a, p in scores.items() if a in allowed and float(p) >= threshold),
                      key=lambda x: (-x[0], x[1]))[:1]
        per_segment.append(tuple(a for _, a in hits))
        for p, a in hits:
            if a not in best:
                order.append(a)
            best[a] = max(best.get(a, 0.0), p)
    compound = len(order) >= 2
    listed = ", ".join(f"{a} {best[a]:.2f}" for a in order) or "no intent above threshold"
    if compound and marked is not None:
        # a further expert brought by a segment the message marks as another request ("Also, ...")
        signalled = any(m and seg and seg[0] != order[0] for m, seg in zip(marked, per_segment))
        if not signalled and min(best.values()) < unmarked_threshold:
            compound = False
            listed += f" (unmarked, below {unmarked_threshold:.2f})"
        elif not signalled and whole:
            top, p = max(((a, float(v)) for a, v in whole.items() if a in allowed), key=lambda x: (x[1], x[0]),
                         default=("", 0.0))
            if top in best and p >= whole_sure:
                compound = False
                listed += f" (unmarked, whole message {top} {p:.2f})"
    return CompoundDecision(compound=compound, experts=tuple(order), segment_experts=tuple(per_segment),
                            scores={a: best[a] for a in order},
                            reason=f"{'compound' if compound else 'single'} request: {listed}")
