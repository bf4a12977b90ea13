"""``switchboard check``: the handoff contracts checked before deploy (``policies.contracts.check_contracts``) with what
the runtime can put in a packet: the facts code finds in a customer's message (``nodes.facts.USER_SAID_KEYS``), the
facts each agent's tools verify (``nodes.facts.VERIFIED_KEYS``), and each agent's side-effect tools (``nodes.tools``).

A changed policy is checked from a Python file (``--policy FILE.py``) that defines ``EDGE_TABLE``
(a ``policies.edges.EdgeTable``) and/or ``CONTRACTS`` (a mapping agent -> ``policies.contracts.AgentContract``); what it
does not define is today's.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graph.contracts.errors import InputError
from policies.contracts import DEFAULT_CONTRACTS, AgentContract, ContractProblem, FactSupply, check_contracts
from policies.edges import DEFAULT_EDGE_TABLE, EdgeTable

__all__ = ["CheckedPolicy", "runtime_supply", "load_policy", "run_check"]


@dataclass(frozen=True)
class CheckedPolicy:
    """The policy a check reads: the edge ``table``, the ``contracts`` and where they came from (``source``)."""

    table: EdgeTable
    contracts: Mapping[str, AgentContract]
    source: str = "policies/ (today's table)"


def runtime_supply() -> FactSupply:
    """What the desk can put in a packet today (``nodes.facts`` and ``nodes.tools``)."""
    from nodes.facts import USER_SAID_KEYS, VERIFIED_KEYS
    from nodes.tools import TOOLS

    verified: dict[str, set[str]] = {}
    side: dict[str, list[str]] = {}
    for spec in TOOLS.values():
        verified.setdefault(spec.agent, set()).update(VERIFIED_KEYS.get(spec.name, ()))
        if spec.side_effect:
            side.setdefault(spec.agent, []).append(spec.name)
    return FactSupply(user_said=USER_SAID_KEYS, verified={a: frozenset(k) for a, k in verified.items()},
                      side_effects={a: tuple(t) for a, t in side.items()})


def load_policy(path: Path | None) -> CheckedPolicy:
    """Today's policy, or the one of the Python file ``path`` (``EDGE_TABLE`` and/or ``CONTRACTS``). Raises InputError
    (one line) for a missing file, a file that fails to import, or one that defines neither or the wrong types."""
    if path is None:
        return CheckedPolicy(DEFAULT_EDGE_TABLE, DEFAULT_CONTRACTS)
    if not path.is_file():
        raise InputError(f"--policy {path}: no such file")
    spec = importlib.util.spec_from_file_location(f"switchboard_checked_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise InputError(f"--policy {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:  # sys.exit(0) in the file would end `switchboard check` with 0: a passed check
        raise InputError(f"--policy {path}: called sys.exit({exc.code!r}) while being imported") from None
    except Exception as exc:  # noqa: BLE001 - any error in the user's file is bad input, said in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise InputError(f"--policy {path}: {type(exc).__name__}: {first}") from None
    table: Any = getattr(module, "EDGE_TABLE", None)
    contracts: Any = getattr(module, "CONTRACTS", None)
    if table is None and contracts is None:
        raise InputError(f"--policy {path}: defines neither EDGE_TABLE nor CONTRACTS")
    if table is not None and not isinstance(table, EdgeTable):
        raise InputError(f"--policy {path}: EDGE_TABLE must be a policies.edges.EdgeTable")
    if contracts is not None and not (isinstance(contracts, Mapping)
                                      and all(isinstance(c, AgentContract) for c in contracts.values())):
        raise InputError(f"--policy {path}: CONTRACTS must map agent names to policies.contracts.AgentContract")
    return CheckedPolicy(table if table is not None else DEFAULT_EDGE_TABLE,
                         contracts if contracts is not None else DEFAULT_CONTRACTS, str(path))


def run_check(policy: CheckedPolicy) -> list[ContractProblem]:
    """Every problem of ``policy`` with today's runtime supply (empty: the policy may be deployed)."""
    return check_contracts(policy.table, policy.contracts, runtime_supply())
