"""The supervisor's merge function: how the typed results of experts called as tools become one answer.

Explicit rules (DESIGN.md, agent as tool: "fan-out with ``Send``, merge by an explicit merge function"):

* **which fields combine** (:data:`FIELD_RULES`): answers are concatenated in plan order; facts, open
  questions, evidence references and proposed actions are unions (deduplicated, first-seen order);
* **which must agree**: the keys of :attr:`MergeRules.must_agree` (amount, currency, merchant) for one
  subject (the same ``transaction_id``); different values for other keys are kept side by side, each with
  the experts that reported it (two experts may rightly talk about two different transactions);
* **which source wins a conflict**: ``system_verified`` over ``user_said`` (a value the user said is dropped
  when an expert verified a different value for the same key); two values of equal rank that must agree
  are an *unresolved* conflict: neither is asserted and the customer gets an open question;
* **failures** (an expert raised, timed out, or returned nothing): ``on_failure="continue"`` answers with the
  gap stated; ``"fail"`` fails the whole (the supervisor goes to fallback).  When no expert returned a
  result there is nothing to answer, so the merge fails whatever the setting.

Pure function over plain data (``ExpertResult.model_dump()`` dicts); no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from graph.contracts.agent_as_tool import AnswerPart, Conflict, Gap, MergedFact

__all__ = ["FIELD_RULES", "SOURCE_RANK", "MergeRules", "MergedFact", "Conflict", "Gap", "AnswerPart",
           "MergeOutcome", "merge_expert_results"]

#: How each field of the experts' results is merged (documentation of :func:`merge_expert_results`).
FIELD_RULES: Mapping[str, str] = {
    "answer": "combine: one part per sub-task, in plan order",
    "facts": "combine: union by (key, value); must_agree keys per subject must agree; system_verified over user_said",
    "open_questions": "combine: union, first-seen order, case-insensitive duplicates dropped",
    "evidence_refs": "combine: union, sorted",
    "proposed_actions": "combine: union by (tool, args), first-seen order",
    "task_id / expert": "must agree with the plan: a result for another task or expert is ignored",
    "status": "failed/timeout/missing results become gaps; on_failure decides continue or fail",
}

#: Source precedence, strongest first: what a system verified beats what the user said, which beats what a model
#: wrote into a handoff (nobody vouches for it).
SOURCE_RANK: tuple[str, ...] = ("system_verified", "user_said", "model_written")


def _rank(source: str) -> int:
    return SOURCE_RANK.index(source) if source in SOURCE_RANK else len(SOURCE_RANK)


@dataclass(frozen=True)
class MergeRules:
    """Configuration of :func:`merge_expert_results`.

    Attributes:
        must_agree: fact keys that must have one value per subject across experts.
        subject_key: the fact key naming what a result's facts are about (default ``transaction_id``).
        on_failure: ``"continue"`` (answer with the gap stated) or ``"fail"`` (fail the whole merge).
    """

    must_agree: frozenset[str] = frozenset({"amount", "amount_minor", "currency", "merchant"})
    subject_key: str = "transaction_id"
    on_failure: Literal["continue", "fail"] = "continue"

    def __post_init__(self) -> None:
        if self.on_failure not in ("continue", "fail"):
            raise ValueError(f"on_failure must be 'continue' or 'fail', got {self.on_failure!r}")


@dataclass(frozen=True)
class MergeOutcome:
    """The merged result.

    Attributes:
        status: ``complete`` (every expert answered), ``partial`` (some gaps, continuing) or ``failed``.
        reason: why the merge failed ("" otherwise).
        parts: one per planned sub-task, plan order.
        facts / conflicts / gaps / open_questions / evidence_refs / proposed_actions: see :data:`FIELD_RULES`.
        ignored: task ids of results that did not match the plan.
    """

    status: Literal["complete", "partial", "failed"]
    reason: str
    parts: tuple[AnswerPart, ...]
    facts: tuple[MergedFact, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    gaps: tuple[Gap, ...] = ()
    open_questions: tuple[str, ...] = ()
    evidence_refs: tuple[str, ...] = ()
    proposed_actions: tuple[Mapping[str, Any], ...] = ()
    ignored: tuple[str, ...] = ()

    @property
    def answered(self) -> tuple[AnswerPart, ...]:
        """The parts whose expert answered."""
        return tuple(p for p in self.parts if p.status == "ok")


def _subject(facts: Sequence[Mapping[str, Any]], key: str) -> str | None:
    vals = sorted((f for f in facts if f.get("key") == key), key=lambda f: _rank(str(f.get("source"))))
    return str(vals[0]["value"]) if vals else None


def merge_expert_results(
    tasks: Sequence[Mapping[str, Any]],
    results: Sequence[Mapping[str, Any]],
    rules: MergeRules = MergeRules(),
) -> MergeOutcome:
    """Merge the experts' results of one fan-out.

    Args:
        tasks: the plan, in order: dicts with ``task_id``, ``expert``, ``objective``.
        results: dicts shaped like ``graph.contracts.agent_as_tool.ExpertResult.model_dump()``: ``task_id``, ``expert``,
            ``status`` (ok | failed | timeout), ``answer``, ``facts`` (list of ``{key, value, source}``),
            ``open_questions``, ``evidence_refs``, ``proposed_actions`` (list of dicts with ``tool``, ``args``),
            ``error``.  Their order does not matter (parallel branches finish in any order).  The graph sends
            one task per expert, so one result per task id; should several arrive, the first one counts.
        rules: the merge rules.

    Returns:
        A :class:`MergeOutcome` (see the module docstring for every rule).  Deterministic: with one result per
        task, the output depends on the plan order, never on the order in which results arrived.
    """
    by_task, ignored = _results_by_task(tasks, results)
    parts, gaps, ok = _parts_and_gaps(tasks, by_task)
    raw = _raw_facts(ok, rules)
    kept, conflicts = _verified_over_said(raw)
    drop, agree_conflicts = _must_agree(kept, rules)
    conflicts += agree_conflicts
    facts_out = _merged_facts(kept, drop)
    status, reason = _status(gaps, bool(ok), rules)
    return MergeOutcome(status=status, reason=reason, parts=tuple(parts), facts=facts_out, conflicts=tuple(conflicts),
                        gaps=tuple(gaps), open_questions=_questions(ok, conflicts), evidence_refs=_refs(ok),
                        proposed_actions=_actions(ok), ignored=tuple(ignored))


_Raw = tuple[str, "str | None", str, str, str]  # (expert, subject, key, value, source)
_Ok = list[tuple[str, Mapping[str, Any]]]  # (expert, result) of the experts that answered, plan order


def _results_by_task(tasks: Sequence[Mapping[str, Any]],
                     results: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Mapping[str, Any]], list[str]]:
    """The first result per planned task id (from the planned expert); the task ids of results ignored."""
    by_task: dict[str, Mapping[str, Any]] = {}
    planned = {str(t["task_id"]): t for t in tasks}
    ignored: list[str] = []
    for r in results:
        tid = str(r.get("task_id"))
        task = planned.get(tid)
        if task is None or r.get("expert") != task.get("expert"):
            ignored.append(tid)
            continue
        by_task.setdefault(tid, r)
    return by_task, ignored


def _parts_and_gaps(tasks: Sequence[Mapping[str, Any]],
                    by_task: Mapping[str, Mapping[str, Any]]) -> tuple[list[AnswerPart], list[Gap], _Ok]:
    """One part per planned task (plan order), a gap per missing or failed one, and the answering experts."""
    parts: list[AnswerPart] = []
    gaps: list[Gap] = []
    ok: _Ok = []
    for t in tasks:
        tid, expert, objective = str(t["task_id"]), str(t["expert"]), str(t.get("objective") or "")
        r = by_task.get(tid)
        if r is None:
            parts.append(AnswerPart(tid, expert, objective, "missing"))
            gaps.append(Gap(expert, objective, "missing", "the expert returned no result"))
            continue
        status = str(r.get("status") or "failed")
        if status == "ok":
            parts.append(AnswerPart(tid, expert, objective, "ok", str(r.get("answer") or "")))
            ok.append((expert, r))
        else:
            parts.append(AnswerPart(tid, expert, objective, status))
            gaps.append(Gap(expert, objective, status, str(r.get("error") or status)))
    return parts, gaps, ok


def _raw_facts(ok: _Ok, rules: MergeRules) -> list[_Raw]:
    """(expert, subject, key, value, source) of every fact of the answering experts, plan order."""
    raw: list[_Raw] = []
    for expert, r in ok:
        facts = [f for f in r.get("facts") or () if isinstance(f, Mapping) and f.get("key")]
        subject = _subject(facts, rules.subject_key)
        for f in facts:
            subj = None if f["key"] == rules.subject_key else subject
            raw.append((expert, subj, str(f["key"]), str(f["value"]), str(f.get("source") or "user_said")))
    return raw


def _verified_over_said(raw: list[_Raw]) -> tuple[list[_Raw], list[Conflict]]:
    """Rule 1: system_verified over user_said, per key over the whole request. Returns the facts kept and one
    resolved conflict per overridden key."""
    verified: dict[str, list[tuple[str, str, str]]] = {}
    for expert, _s, k, v, src in raw:
        if src == "system_verified":
            verified.setdefault(k, []).append((expert, v, src))
    kept: list[_Raw] = []
    overridden: dict[str, list[tuple[str, str, str]]] = {}
    for item in raw:
        expert, _s, k, v, src = item
        if src != "system_verified" and k in verified and v not in {x[1] for x in verified[k]}:
            overridden.setdefault(k, []).append((expert, v, src))
            continue
        kept.append(item)
    conflicts = [Conflict(k, None, tuple(dict.fromkeys([*said, *verified[k]])), verified[k][0][1],
                          "system_verified over user_said") for k, said in overridden.items()]
    return kept, conflicts


def _must_agree(kept: list[_Raw], rules: MergeRules) -> tuple[set[tuple[str | None, str, str]], list[Conflict]]:
    """Rule 2: must-agree keys, per subject. After rule 1 the values left for a key are all of one rank (all
    verified, or all said, when nobody verified the key), so two distinct values are an unresolved conflict: the
    values are dropped (returned as ``(subject, key, value)``) and the customer is asked."""
    groups: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for expert, subj, k, v, src in kept:
        if k in rules.must_agree and subj is not None:
            groups.setdefault((subj, k), []).append((expert, v, src))
    drop: set[tuple[str | None, str, str]] = set()
    conflicts: list[Conflict] = []
    for (subj, k), vals in groups.items():
        distinct = list(dict.fromkeys(v for _, v, _ in vals))
        if len(distinct) < 2:
            continue
        values = tuple(dict.fromkeys(vals))
        said = ", ".join(f"{e} says {v}" for e, v, _ in values)
        conflicts.append(Conflict(k, subj, values, None, "must agree: unresolved",
                                  f"Our checks disagree on the {k.replace('_', ' ')} of {subj} ({said}); can you confirm it?"))
        drop |= {(subj, k, v) for v in distinct}
    return drop, conflicts


def _merged_facts(kept: list[_Raw], drop: set[tuple[str | None, str, str]]) -> tuple[MergedFact, ...]:
    """One MergedFact per (key, value): the strongest source, the experts that reported it, its subject."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for expert, subj, k, v, src in kept:
        if (subj, k, v) in drop:
            continue
        m = merged.setdefault((k, v), {"source": src, "experts": [], "subject": subj})
        if _rank(src) < _rank(m["source"]):
            m["source"] = src
        if expert not in m["experts"]:
            m["experts"].append(expert)
    return tuple(MergedFact(k, v, m["source"], tuple(m["experts"]), m["subject"]) for (k, v), m in merged.items())


def _questions(ok: _Ok, conflicts: list[Conflict]) -> tuple[str, ...]:
    """Union of the experts' open questions and the conflicts' questions (first seen, case-insensitive)."""
    questions: dict[str, str] = {}
    for _e, r in ok:
        for q in r.get("open_questions") or ():
            questions.setdefault(str(q).strip().lower(), str(q).strip())
    for c in conflicts:
        if c.question:
            questions.setdefault(c.question.lower(), c.question)
    return tuple(questions.values())


def _refs(ok: _Ok) -> tuple[str, ...]:
    return tuple(sorted({str(x) for _e, r in ok for x in r.get("evidence_refs") or ()}))


def _actions(ok: _Ok) -> tuple[Mapping[str, Any], ...]:
    """Union of proposed actions by (tool, args), first seen, each with the expert that proposed it."""
    actions: dict[str, Mapping[str, Any]] = {}
    for expert, r in ok:
        for a in r.get("proposed_actions") or ():
            key = json.dumps([a.get("tool"), a.get("args")], sort_keys=True, default=str)
            actions.setdefault(key, {**a, "expert": a.get("expert") or expert})
    return tuple(actions.values())


def _status(gaps: list[Gap], any_ok: bool, rules: MergeRules) -> tuple[Literal["complete", "partial", "failed"], str]:
    """complete without gaps; partial with gaps; failed when nobody answered or ``on_failure`` is ``fail``."""
    if not gaps:
        return "complete", ""
    listing = "; ".join(f"{g.expert} {g.status} ({g.reason})" for g in gaps)
    if not any_ok:
        return "failed", "no expert returned a result: " + listing
    if rules.on_failure == "fail":
        return "failed", "an expert could not finish and on_failure is 'fail': " + listing
    return "partial", ""
