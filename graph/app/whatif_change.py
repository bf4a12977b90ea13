"""The change file of ``switchboard whatif``: a small YAML, JSON or TOML document naming a change to the policy set.

Format (every key optional; unknown keys are refused)::

    remove_edges: [[billing, refunds]]        # handoff edges the change removes (they must exist today)
    add_edges: [[refunds, cards]]             # handoff edges it adds (between agents; not existing today)
    max_hops: 2                               # handoffs one turn may take, 1..100
    risk:                                     # the refund risk rules; amounts in the refund's currency
      auto_approve_limit: 10.00               #   refunds up to this are paid without a human (today 20.00)
      two_approvers_above: 500.00             #   above this a human approval needs two approvers (today 500.00)
      reject_above: 1000.00                   #   above this a refund is never paid by the desk (today 1000.00)
      recent_refunds_for_review: 2            #   earlier refunds in 30 days that send a new one to a human
    guards:                                   # what a handoff's packet must carry to reach its target
      require: [{target: cards, fact: card_id}]
      drop: [{target: refunds, fact: transaction_id}]

A Python module may change the set further (:func:`load_policy_module`): it exposes ``POLICY`` (a
``policies.policy_set.PolicySet``) or ``whatif(policy) -> PolicySet``, given the set after the file's changes.
Every problem raises :class:`graph.contracts.errors.InputError` with one line naming the file and the key.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import tomllib
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from graph.contracts.errors import InputError
from policies.edges import AGENTS, SUPERVISOR, is_legal_handoff
from policies.handoff import FactRequirement
from policies.policy_set import PolicySet, with_edges

__all__ = ["CHANGE_KEYS", "RISK_KEYS", "load_change", "apply_change", "load_policy_module", "check_policy", "FORMAT_HELP"]

#: The top-level keys of a change file.
CHANGE_KEYS = ("remove_edges", "add_edges", "max_hops", "risk", "guards")
#: ``risk`` keys -> the ``policies.risk.RiskRules`` field each sets (amounts are given in major units).
RISK_KEYS = {"auto_approve_limit": "auto_approve_limit_minor", "two_approvers_above": "two_approvers_above_minor",
             "reject_above": "reject_above_minor", "recent_refunds_for_review": "recent_refunds_for_review"}
_AGENT_NAMES = frozenset({*AGENTS, SUPERVISOR})

#: The format, for ``switchboard whatif --help``.
FORMAT_HELP = ("The change file (YAML, JSON or TOML, by its extension) may hold: remove_edges: [[billing, refunds]]; "
               "add_edges: [[refunds, cards]]; max_hops: 2; risk: {auto_approve_limit: 10.00, two_approvers_above: "
               "500.00, reject_above: 1000.00, recent_refunds_for_review: 2}; guards: {require: [{target: cards, "
               "fact: card_id}], drop: [{target: refunds, fact: transaction_id}]}. Amounts in the refund's currency.")


def load_change(path: Path) -> dict[str, Any]:
    """The change document at ``path`` (``.yaml``/``.yml``, ``.json`` or ``.toml``) as a dict. Raises InputError (one
    line) for a missing file, another extension, a syntax error or a document that is not a mapping."""
    if not path.is_file():
        raise InputError(f"change file {path} not found")
    kind = path.suffix.lower()
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"change file {path} is not UTF-8 text (undecodable byte at position {exc.start})") from None
    except OSError as exc:
        raise InputError(f"change file {path} cannot be read: {exc.strerror or type(exc).__name__}") from None
    try:
        if kind in (".yaml", ".yml"):
            import yaml

            doc = yaml.safe_load(text)
        elif kind == ".json":
            doc = json.loads(text)
        elif kind == ".toml":
            doc = tomllib.loads(text)
        else:
            raise InputError(f"change file {path}: use .yaml, .yml, .json or .toml (got {kind or 'no extension'!r})")
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - every parser's syntax error becomes one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"change file {path} is not valid {kind.lstrip('.').upper()}: {first}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise InputError(f"change file {path}: expected a mapping of {', '.join(CHANGE_KEYS)}")
    return doc


def apply_change(base: PolicySet, change: dict[str, Any], source: str = "change") -> PolicySet:
    """``base`` with ``change`` (a :func:`load_change` document) applied. Raises InputError naming ``source`` and the
    key for an unknown key, an unknown agent, an edge to remove that does not exist or to add that does, an amount
    that is not a non-negative number with at most two decimals, a hop budget outside 1..100."""
    unknown = sorted(set(change) - set(CHANGE_KEYS))
    if unknown:
        raise InputError(f"{source}: unknown key {unknown[0]!r} (known: {', '.join(CHANGE_KEYS)})")
    removed = _edges(change.get("remove_edges"), f"{source}: remove_edges")
    added = _edges(change.get("add_edges"), f"{source}: add_edges")
    for s, t in sorted(removed):
        if not is_legal_handoff(s, t, base.edges):
            raise InputError(f"{source}: remove_edges: {s} -> {t} is not an edge of the table")
    for s, t in sorted(added):
        if is_legal_handoff(s, t, base.edges):
            raise InputError(f"{source}: add_edges: {s} -> {t} is an edge of the table already")
    policy = with_edges(base, remove=removed, add=added)
    if "max_hops" in change:
        policy = replace(policy, max_hops=_hops(change["max_hops"], source))
    if "risk" in change:
        policy = replace(policy, risk=_risk(policy, change["risk"], f"{source}: risk"))
    if "guards" in change:
        policy = replace(policy, guards=_guards(policy, change["guards"], f"{source}: guards"))
    return policy


def _hops(hops: Any, source: str) -> int:
    """``hops`` when it is a hop budget (a whole number from 1 to 100); else InputError naming ``source``."""
    if isinstance(hops, bool) or not isinstance(hops, int) or not 1 <= hops <= 100:
        raise InputError(f"{source}: max_hops must be a whole number from 1 to 100 (got {hops!r})")
    return hops


def check_policy(policy: PolicySet, source: str) -> PolicySet:
    """``policy`` when its numbers are ones a change file may set (a hop budget from 1 to 100, non-negative whole
    amounts in minor units, at least one recent refund for review); else InputError naming ``source`` and the field.
    A Python module builds its PolicySet by hand, past :func:`apply_change`'s checks: this holds it to the same."""
    _hops(policy.max_hops, source)
    for name in ("auto_approve_limit_minor", "reject_above_minor", "two_approvers_above_minor"):
        value = getattr(policy.risk, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"{source}: risk.{name} must be a non-negative whole number of minor units (got {value!r})")
    recent = policy.risk.recent_refunds_for_review
    if isinstance(recent, bool) or not isinstance(recent, int) or recent < 1:
        raise InputError(f"{source}: risk.recent_refunds_for_review must be a whole number >= 1 (got {recent!r})")
    return policy


def _edges(value: Any, where: str) -> frozenset[tuple[str, str]]:
    if value is None:
        return frozenset()
    if not isinstance(value, list):
        raise InputError(f"{where}: expected a list of [source, target] pairs")
    out: set[tuple[str, str]] = set()
    for pair in value:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise InputError(f"{where}: {pair!r} is not a [source, target] pair of agent names")
        for name in pair:
            if name not in _AGENT_NAMES:
                raise InputError(f"{where}: unknown agent {name!r} (agents: {', '.join(sorted(_AGENT_NAMES))})")
        if pair[0] == pair[1]:
            raise InputError(f"{where}: {pair[0]} -> {pair[1]} is a handoff to oneself")
        out.add((pair[0], pair[1]))
    return frozenset(out)


def _minor(value: Any, where: str) -> int:
    """An amount in major units (``10``, ``10.5``, ``"10.00"``) as minor units (1000, 1050, 1000)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(f"{where}: expected an amount such as 10.00 (got {value!r})")
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise InputError(f"{where}: expected an amount such as 10.00 (got {value!r})") from None
    if not amount.is_finite() or amount < 0 or amount != amount.quantize(Decimal("0.01")):
        raise InputError(f"{where}: expected a non-negative amount with at most two decimals (got {value!r})")
    return int(amount * 100)


def _risk(policy: PolicySet, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected a mapping of {', '.join(RISK_KEYS)}")
    rules = policy.risk
    for key, raw in value.items():
        field_name = RISK_KEYS.get(key)
        if field_name is None:
            raise InputError(f"{where}: unknown key {key!r} (known: {', '.join(RISK_KEYS)})")
        if key == "recent_refunds_for_review":
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
                raise InputError(f"{where}.{key}: expected a whole number >= 1 (got {raw!r})")
            number = raw
        else:
            number = _minor(raw, f"{where}.{key}")
        rules = replace(rules, **{field_name: number})
    return rules


def _guards(policy: PolicySet, value: Any, where: str) -> tuple[FactRequirement, ...]:
    if not isinstance(value, dict) or set(value) - {"require", "drop"}:
        raise InputError(f"{where}: expected a mapping with require and/or drop lists")
    guards = list(policy.guards)
    for item in _requirements(value.get("drop"), f"{where}.drop"):
        match = [g for g in guards if (g.target, g.fact) == (item.target, item.fact)]
        if not match:
            raise InputError(f"{where}.drop: no guard {item.target} needs {item.fact} today")
        guards = [g for g in guards if g not in match]
    for item in _requirements(value.get("require"), f"{where}.require"):
        if any((g.target, g.fact) == (item.target, item.fact) for g in guards):
            raise InputError(f"{where}.require: {item.target} needs {item.fact} already")
        guards.append(item)
    return tuple(guards)


def _requirements(value: Any, where: str) -> list[FactRequirement]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"{where}: expected a list of {{target, fact}} mappings")
    out = []
    for item in value:
        if not (isinstance(item, dict) and isinstance(item.get("target"), str) and isinstance(item.get("fact"), str)
                and set(item) <= {"target", "fact", "asked_by"}):
            raise InputError(f"{where}: {item!r} is not a {{target, fact[, asked_by]}} mapping")
        if item["target"] not in _AGENT_NAMES | {"human_approval"}:
            raise InputError(f"{where}: unknown target {item['target']!r}")
        asked = item.get("asked_by")
        if asked is not None and not isinstance(asked, str):
            raise InputError(f"{where}: asked_by must be a word (got {asked!r})")
        out.append(FactRequirement(item["target"], item["fact"], asked.lower() if asked else None))
    return out


def load_policy_module(spec: str, policy: PolicySet) -> PolicySet:
    """The policy set a Python module gives: ``spec`` is a ``.py`` file or a dotted module name exposing ``POLICY``
    (a PolicySet) or ``whatif(policy) -> PolicySet`` (called with ``policy``). Raises InputError (one line) when it
    cannot be imported or gives no PolicySet."""
    try:
        if spec.endswith(".py"):
            path = Path(spec)
            if not path.is_file():
                raise InputError(f"policy module {spec} not found")
            loaded = importlib.util.spec_from_file_location(f"switchboard_whatif_{path.stem}", path)
            if loaded is None or loaded.loader is None:
                raise InputError(f"policy module {spec} cannot be loaded")
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
        else:
            module = importlib.import_module(spec)
        hook = getattr(module, "whatif", None)
        out = hook(policy) if callable(hook) else getattr(module, "POLICY", None)
    except InputError:
        raise
    except SystemExit as exc:  # sys.exit() in the module would end the command silently, with no report
        raise InputError(f"policy module {spec} called sys.exit({exc.code!r}) instead of giving a PolicySet") from None
    except Exception as exc:  # noqa: BLE001 - the user's module: its error becomes one line
        raise InputError(f"policy module {spec}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")\
            from None
    if not isinstance(out, PolicySet):
        raise InputError(f"policy module {spec} must expose POLICY (a PolicySet) or whatif(policy) -> PolicySet")
    return check_policy(out, f"policy module {spec}")
