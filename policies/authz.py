"""Authorization decisions (control-flow rule 4; README "Identity and authorization").

Pure functions over plain data: who is asking (a :class:`graph.contracts.context.Principal`), what the thread or the request
says (its owner, the refund's customer, approvals so far) and what the business store holds about an operator
(:class:`OperatorFacts`, built by the caller from its record). Never model-written arguments, never a name typed
into a decision.

* :func:`authorize_turn` — may this principal send a turn on this thread?
* :func:`authorize_resume` — may this principal resume this paused thread at all (before any decision is read)?
* :func:`authorize_decision` — may this principal take this decision on this approval request (four eyes)?
* :func:`authorize_operator` — may this operator run this command (CLI)?
* :func:`authorize_tool` — may the acting context run this business tool?
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from graph.contracts.context import RESERVED_NAMES, Principal
from graph.contracts.state_values import owner_record

__all__ = ["AuthzDecision", "OperatorFacts", "NOT_YOURS", "owner_of", "authorize_turn", "authorize_resume",
           "authorize_decision", "authorize_operator", "authorize_tool", "approval_overdue", "DECIDING_ROLES",
           "OPERATOR_CANCEL", "UNCONFIRMED_CANCEL"]

#: Roles that may decide a paused refund (approve, reject, expire when overdue). Cancelling is the customer's own
#: withdrawal, never an operator's decision (:func:`authorize_decision`).
DECIDING_ROLES = frozenset({"approver"})

#: Why an operator's ``cancel`` is refused: the team's way to say no is ``reject`` (the customer is told the fixed
#: rejection reason); a cancel is recorded as the customer's own withdrawal ("As you asked, … is cancelled").
OPERATOR_CANCEL = "a cancel is the customer's own withdrawal of their request; an approver rejects it instead"
#: Why a customer's ``cancel`` is refused before they confirmed it (``policies.cancellation``: an explicit wish, the
#: desk's question "Cancel refund …? yes/no", then a yes).
UNCONFIRMED_CANCEL = ("a cancel is taken only once you confirmed it: tell the desk you want to cancel, and it asks "
                      "'Cancel refund …? yes/no'; only a yes to that question cancels")


@dataclass(frozen=True)
class AuthzDecision:
    """``allowed`` and a one-line ``reason`` (shown to the caller, recorded with an ``access_denied`` event)."""

    allowed: bool
    reason: str = ""


@dataclass(frozen=True)
class OperatorFacts:
    """What the business store holds about an operator (``checkpoints.business.Operator`` as plain data).

    Attributes: ``name``, ``tenant_id``, ``roles``, ``enabled``, ``customer_id`` (the operator's own customer
    account in the tenant, if any)."""

    name: str
    tenant_id: str
    roles: frozenset[str]
    enabled: bool = True
    customer_id: str | None = None


def owner_of(values: Mapping) -> tuple[str, str] | None:
    """``(customer_id, tenant_id)`` a thread belongs to, from its state ``values``: the write-once ``owner``, or
    the ``identity`` of threads started before ``owner`` existed; None for a new thread."""
    owner = owner_record(values)
    if owner is not None and owner.customer_id:
        return owner.customer_id, owner.tenant_id
    ident = values.get("identity") or {}
    if ident.get("user_id"):
        return str(ident["user_id"]), str(ident.get("tenant_id") or "")
    return None


#: The refusal of a customer's turn or resume on a thread that is not theirs; the same words as for a thread that does
#: not exist (``graph.conversation``), so the answer never confirms that another customer's thread id exists.
NOT_YOURS = "the thread is not one of your threads"


def _is_owner(principal: Principal, owner: tuple[str, str] | None) -> bool:
    return principal.kind == "customer" and owner is not None and (principal.id, principal.tenant_id) == owner


def authorize_turn(principal: Principal | None, owner: tuple[str, str] | None, customer_known: bool) -> AuthzDecision:
    """May ``principal`` send a turn on a thread owned by ``owner`` (None: a new thread, which it will own)?

    Only a customer sends turns, only on their own threads, and only if the business store knows them in their
    tenant (``customer_known``). Operators act through resume, recover and the task commands, never as the customer.
    """
    if principal is None:
        return AuthzDecision(False, "no identified caller")
    if principal.kind != "customer":
        return AuthzDecision(False, f"{principal.ref} is not a customer; operators do not send turns on a "
                                    "customer's thread")
    if not customer_known:
        return AuthzDecision(False, f"unknown customer {principal.id!r} in tenant {principal.tenant_id!r}")
    if owner is not None and not _is_owner(principal, owner):
        return AuthzDecision(False, NOT_YOURS)
    return AuthzDecision(True)


def authorize_resume(principal: Principal | None, owner: tuple[str, str] | None,
                     operator: OperatorFacts | None) -> AuthzDecision:
    """May ``principal`` resume a paused thread of ``owner`` at all? Decided from identity alone, before the resume
    value is read: the owner (who may only cancel, see :func:`authorize_decision`) or an enabled operator of the
    owner's tenant registered in the business store (``operator``; None when not registered)."""
    if principal is None:
        return AuthzDecision(False, "no identified caller")
    if principal.kind == "customer":
        if _is_owner(principal, owner):
            return AuthzDecision(True)
        return AuthzDecision(False, NOT_YOURS)
    if principal.kind != "operator":
        return AuthzDecision(False, f"{principal.ref} may not resume a thread")
    if operator is None:
        return AuthzDecision(False, f"{principal.ref} is not a registered operator")
    if not operator.enabled:
        return AuthzDecision(False, f"operator {operator.name} is disabled")
    if owner is not None and operator.tenant_id != owner[1]:
        return AuthzDecision(False, f"operator {operator.name} belongs to tenant {operator.tenant_id}, not the "
                                    f"thread's tenant {owner[1]}")
    return AuthzDecision(True)


def _same_principal(customer_id: str, *ids: str | None) -> bool:
    """True when any of ``ids`` (an operator's own customer account, its name, the caller's id) names the refund's
    customer ``customer_id``, compared without surrounding blanks and case (ids are lower-case by convention, so a
    difference in case is never a different person)."""
    wanted = (customer_id or "").strip().casefold()
    return bool(wanted) and any(i is not None and i.strip().casefold() == wanted for i in ids)


def _authorize_cancel(principal: Principal, customer_id: str, confirmed: bool) -> AuthzDecision:
    """The ``cancel`` rule of :func:`authorize_decision`."""
    if principal.kind != "customer":
        return AuthzDecision(False, OPERATOR_CANCEL)
    if principal.id != customer_id:
        return AuthzDecision(False, "only the customer who asked for the refund may cancel it")
    return AuthzDecision(True) if confirmed else AuthzDecision(False, UNCONFIRMED_CANCEL)


def authorize_decision(principal: Principal, operator: OperatorFacts | None, decision: str, customer_id: str,
                       approvals: Sequence[str] = (), overdue: bool = False,
                       cancel_confirmed: bool = False) -> AuthzDecision:
    """May ``principal`` take ``decision`` on the refund of ``customer_id``?

    * ``cancel``: only the customer who asked for the refund, and only once they confirmed it (``cancel_confirmed``:
      the desk asked "Cancel refund …? yes/no" on this paused thread and the customer has not answered anything else
      since, or answered yes — ``policies.cancellation.cancel_was_confirmed`` over the thread's confirmation record;
      the chat's two-step rule, ``policies.cancellation``, for every way in). Never an operator: a cancel is the
      customer's own withdrawal and is told to them as such; the team's no is ``reject`` (:data:`OPERATOR_CANCEL`);
    * ``approve`` / ``reject``: an enabled, registered operator with the ``approver`` role (:data:`DECIDING_ROLES`)
      who is not the refund's customer (neither ``operator.customer_id`` nor the operator's own name/id equals
      ``customer_id``), whose name is not reserved
      (``graph.contracts.context.RESERVED_NAMES``), and — for ``approve`` — who has not already approved it (``approvals``:
      refs of the approvals recorded so far; the two-approver tier needs two *different* people);
    * ``expire``: an approver, only when the request is past its deadline (``overdue``);
    * anything else (``close`` is taken by ``switchboard tasks close``, not by a resume): refused.
    """
    if decision == "cancel":
        return _authorize_cancel(principal, customer_id, cancel_confirmed)
    if principal.kind != "operator" or operator is None:
        return AuthzDecision(False, f"{principal.ref} may not {decision} a refund; the approver role is required")
    if not operator.enabled:
        return AuthzDecision(False, f"operator {operator.name} is disabled")
    if not (operator.roles & DECIDING_ROLES):
        return AuthzDecision(False, f"operator {operator.name} lacks the approver role (has: "
                                    f"{', '.join(sorted(operator.roles)) or 'none'})")
    if operator.name in RESERVED_NAMES:
        return AuthzDecision(False, f"{operator.name!r} is a reserved name and may not decide")
    if _same_principal(customer_id, operator.customer_id, operator.name, principal.id):
        return AuthzDecision(False, f"operator {operator.name} is the refund's customer and may not decide it")
    if decision == "reject":
        return AuthzDecision(True)
    if decision == "approve":
        if principal.ref in approvals:
            return AuthzDecision(False, f"{principal.ref} already approved this refund; a second, different "
                                        "approver is required")
        return AuthzDecision(True)
    if decision == "expire":
        return AuthzDecision(True) if overdue else AuthzDecision(False, "the approval is not past its deadline")
    return AuthzDecision(False, f"{decision!r} is not a decision a resume can take")


def authorize_operator(operator: OperatorFacts | None, name: str, allowed_roles: Collection[str],
                       tenant_id: str | None = None) -> AuthzDecision:
    """May operator ``name`` (its store record as ``operator``, None when unknown) run a command that needs one of
    ``allowed_roles``, on data of ``tenant_id`` (None: the operator's own tenant)?"""
    if not name:
        return AuthzDecision(False, "this command acts as an operator: pass --as NAME or set SWITCHBOARD_OPERATOR")
    if operator is None:
        return AuthzDecision(False, f"unknown operator {name!r}")
    if not operator.enabled:
        return AuthzDecision(False, f"operator {name} is disabled")
    if not (operator.roles & set(allowed_roles)):
        return AuthzDecision(False, f"operator {name} lacks the role {' or '.join(sorted(allowed_roles))} (has: "
                                    f"{', '.join(sorted(operator.roles)) or 'none'})")
    if tenant_id is not None and tenant_id != operator.tenant_id:
        return AuthzDecision(False, f"operator {name} belongs to tenant {operator.tenant_id}, not {tenant_id}")
    return AuthzDecision(True)


def authorize_tool(tool: str, side_effect: bool, roles: Collection[str], user_id: str | None) -> AuthzDecision:
    """May the caller run ``tool``?  Read-only tools need an identified user; side effects additionally need the
    ``customer`` role (acting on one's own records; the store scopes every record by ``user_id``). A run resumed by
    an operator acts on the thread owner's records read-only (``nodes.principal.acting_context``)."""
    if not user_id:
        return AuthzDecision(False, f"{tool} needs an identified customer")
    if side_effect and "customer" not in roles:
        return AuthzDecision(False, f"{tool} changes records and needs the customer role")
    return AuthzDecision(True)


#: Hours a request stored without a ``deadline`` may wait (the documented default of ``approval_deadline_h``).
LEGACY_DEADLINE_H = 72.0


def approval_overdue(request: Mapping[str, Any], now: datetime) -> bool:
    """True when the approval ``request`` (an ``ApprovalRequest`` dict) is past the deadline stored with it when it
    was requested (``deadline``, ISO-8601 UTC) at ``now`` (aware datetime). The deadline is fixed at request time
    (``Settings.approval_deadline_h`` of the requesting process); the deciding process's settings play no part. A
    request stored before deadlines were recorded counts from ``requested_at`` + :data:`LEGACY_DEADLINE_H`; one with
    neither time is never overdue."""
    if request.get("deadline"):
        return now > _utc(str(request["deadline"]))
    if request.get("requested_at"):
        return now - _utc(str(request["requested_at"])) > timedelta(hours=LEGACY_DEADLINE_H)
    return False


def _utc(text: str) -> datetime:
    """An ISO-8601 time (``Z`` or an offset; naive = UTC) as an aware UTC datetime."""
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)).astimezone(UTC)
