"""The local run context: identity and handles that never enter the model's messages (DESIGN.md, State)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

__all__ = ["RunContext"]


@dataclass(frozen=True)
class RunContext:
    """Per-run context passed as ``context=RunContext(...)`` to ``invoke``/``stream``.

    Attributes:
        user_id: the authenticated customer id (e.g. ``"c_ada"``); authorization reads this, never
            model-written arguments.
        tenant_id: the tenant (bank brand) the customer belongs to.
        request_id: id of this request, for tracing.
        locale: BCP-47 language tag for answers (only ``en`` templates ship).
        roles: roles of the caller (e.g. ``("customer",)``; an approver has ``"approver"``).
    """

    user_id: str = "c_ada"
    tenant_id: str = "t_demo"
    request_id: str = field(default_factory=lambda: f"r_{uuid.uuid4().hex[:12]}")
    locale: str = "en"
    roles: tuple[str, ...] = ("customer",)
