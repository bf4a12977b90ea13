"""The local run context and the principal a run acts for (DESIGN.md, State; README "Identity and authorization").

Identity and handles never enter the model's messages. Two kinds of principal call the desk:

* a **customer** of one tenant (``RunContext(user_id="c_ada", tenant_id="t_demo")``): sends turns on the threads
  they own and may cancel their own pending refund;
* an **operator** of one tenant (``RunContext.for_operator("ann", "t_demo")``): a person of the bank registered in
  the business store with roles (``agent``, ``approver``, ``admin``); resumes paused threads with decisions,
  inspects threads. An operator never sends turns.

A third kind, ``system``, names the automatic rules in recorded decisions (``system:risk-policy``); no caller can be
it. A principal is written as its *ref* ``"<kind>:<id>"`` wherever it is recorded (decisions, audit rows, events),
so a customer id and an operator name can never be confused.

Contract module: imports nothing of the project.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["RunContext", "Principal", "PrincipalKind", "OPERATOR_ROLES", "RESERVED_NAMES", "SYSTEM_RISK_POLICY",
           "OPERATOR_NAME_RE", "principal_ref"]

PrincipalKind = Literal["customer", "operator", "system"]

#: Roles an operator may hold (README "Identity and authorization"): ``agent`` reads threads, traces and stats of
#: their tenant; ``approver`` decides paused refunds (and ends overdue ones); ``admin`` manages operators and tokens.
OPERATOR_ROLES: tuple[str, ...] = ("agent", "approver", "admin")

#: Names no operator may take: the names the automatic rules and the old free-text approvals used.
RESERVED_NAMES: frozenset[str] = frozenset({"risk-policy", "system", "customer", "auto", "root", "admin", "anonymous"})

#: The roles a context without an operator may carry: ``customer`` (a customer's own run) and ``operator`` (the
#: read-only context an operator's run reads the owner's records with, ``nodes.principal.acting_context``).
CUSTOMER_CONTEXT_ROLES: tuple[str, ...] = ("customer", "operator")

#: The principal recorded for decisions the risk rules take automatically (``policies.risk``).
SYSTEM_RISK_POLICY = "system:risk-policy"

#: Operator names: lower-case letters, digits, ``.``, ``_`` and ``-``, starting with a letter, 2..64 characters.
OPERATOR_NAME_RE = re.compile(r"^[a-z][a-z0-9._-]{1,63}$")


def principal_ref(kind: str, principal_id: str) -> str:
    """``"<kind>:<id>"``, e.g. ``"operator:ann"``, ``"customer:c_ada"``: how a principal is recorded."""
    return f"{kind}:{principal_id}"


@dataclass(frozen=True)
class Principal:
    """Who a run or a command acts for.

    Attributes:
        kind: ``customer``, ``operator`` or ``system``.
        id: the customer id (``c_ada``) or the operator name (``ann``).
        tenant_id: the tenant the principal belongs to.
        roles: ``("customer",)`` for a customer; an operator's roles as claimed by the caller (the graph and the CLI
            re-read them from the business store before they authorize anything).
        source: ``"server"`` when an authenticating server (``langgraph dev`` / LangGraph API custom auth, Aegra)
            vouched for it, ``"context"`` when it came from the caller's RunContext (Python API, CLI).
    """

    kind: PrincipalKind
    id: str
    tenant_id: str
    roles: tuple[str, ...] = ()
    source: Literal["context", "server"] = "context"

    @property
    def ref(self) -> str:
        """``"<kind>:<id>"`` (see :func:`principal_ref`)."""
        return principal_ref(self.kind, self.id)

    def same_as(self, other: Principal) -> bool:
        """Same kind, id and tenant (roles and source aside)."""
        return (self.kind, self.id, self.tenant_id) == (other.kind, other.id, other.tenant_id)


@dataclass(frozen=True)
class RunContext:
    """Per-run context passed as ``context=RunContext(...)`` to ``invoke``/``stream``.

    Attributes:
        user_id: the customer a customer's run acts for (e.g. ``"c_ada"``); authorization reads this, never
            model-written arguments. None in an operator's context.
        tenant_id: the tenant (bank brand) of the principal.
        request_id: id of this request, for tracing.
        locale: BCP-47 language tag for answers (only ``en`` templates ship).
        roles: roles the caller claims (``("customer",)`` for a customer). For an operator they are informational:
            what the operator may do is read from the business store.
        operator: the operator name when an operator acts (``RunContext.for_operator``); None for a customer.

    When a server authenticated the request (``langgraph dev`` with ``graph/service/auth.py``), the server's user wins over
    this context and a context naming someone else is refused (``nodes.principal.resolve_principal``).

    Raises:
        ValueError (one line) when the context names two principals (``user_id`` and ``operator``: use
            :meth:`for_customer` or :meth:`for_operator`), or when a customer's context (no ``operator``) claims roles
            other than ``customer`` — ``operator`` alone is allowed there: it marks the read-only context an operator's
            run reads the owner's records with (``nodes.principal.acting_context``).
        TypeError: an unknown field (a dataclass refuses unknown keyword arguments).
    """

    user_id: str | None = "c_ada"
    tenant_id: str = "t_demo"
    request_id: str = field(default_factory=lambda: f"r_{uuid.uuid4().hex[:12]}")
    locale: str = "en"
    roles: tuple[str, ...] = ("customer",)
    operator: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.roles, str) or not isinstance(self.roles, (tuple, list)):
            raise ValueError(f"roles must be a list of role names, not {type(self.roles).__name__}")
        object.__setattr__(self, "roles", tuple(str(r) for r in self.roles))
        if self.operator and self.user_id:
            default = " (the demo customer, user_id's default)" if self.user_id == "c_ada" else ""
            raise ValueError(f"the run context names two principals (user_id {self.user_id!r}{default} and operator "
                             f"{self.operator!r}); an operator acts with RunContext.for_operator(name, tenant), a "
                             "customer with RunContext.for_customer(customer_id, tenant)")
        claimed = sorted(set(self.roles) - set(CUSTOMER_CONTEXT_ROLES))
        if not self.operator and claimed:
            raise ValueError(f"a customer's run context cannot claim roles {claimed}; an operator acts with "
                             "RunContext.for_operator(name, tenant)")

    @classmethod
    def for_customer(cls, customer_id: str, tenant_id: str, **kw: object) -> RunContext:
        """The context of customer ``customer_id`` of ``tenant_id``."""
        return cls(user_id=customer_id, tenant_id=tenant_id, roles=("customer",), **kw)  # type: ignore[arg-type]

    @classmethod
    def for_operator(cls, name: str, tenant_id: str, roles: tuple[str, ...] = (), **kw: object) -> RunContext:
        """The context of operator ``name`` of ``tenant_id`` (``roles``: what the caller claims; informational)."""
        return cls(user_id=None, tenant_id=tenant_id, roles=tuple(roles), operator=name, **kw)  # type: ignore[arg-type]

    def principal(self) -> Principal:
        """The principal this context names: the operator when ``operator`` is set, else the customer ``user_id``.
        Raises ValueError when it names nobody (no operator and no user_id)."""
        if self.operator:
            return Principal("operator", str(self.operator), self.tenant_id, tuple(self.roles))
        if not self.user_id:
            raise ValueError("the run context names no principal (no user_id and no operator)")
        return Principal("customer", str(self.user_id), self.tenant_id, ("customer",))
