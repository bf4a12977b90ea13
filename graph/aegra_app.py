"""The custom app ``switchboard serve`` mounts in Aegra (``aegra.json`` ``"http": {"app": …}``): one ASGI middleware
that gives every run endpoint the request checks of ``graph/auth.py``.

Why: Aegra 0.6 calls the ``threads.create_run`` authorization handler for ``POST /threads/{id}/runs`` only; its
``/runs/wait`` and ``/runs/stream`` skip it, so a client's run context and request shape would reach the graph
unchecked (the graph still refuses anyone but the thread's owner or a registered operator, but not a ``goto``
command). :class:`RunGuard` runs before Aegra's routes on every ``POST …/runs``, ``…/runs/wait``,
``…/runs/stream``: it authenticates the bearer token with :func:`graph.auth.authenticate` (401), refuses what
:func:`graph.auth.check_run_request` refuses (403), and replaces the body's ``context`` with the authenticated
principal's (:func:`graph.auth.run_context_for`) before passing the request on; a customer's run on a thread records
the customer as the thread's owner first (:func:`graph.auth.checked_owner`: 404 when the thread is another
customer's). Aegra then authenticates again.
"""

from __future__ import annotations

import json
import re
from typing import Any

from graph.auth import authenticate, check_run_request, checked_owner, principal_claims, run_context_for

__all__ = ["RunGuard", "checked_body"]  # and `app`, made on first access (module __getattr__)

#: The run endpoints: with or without a thread, create / wait / stream.
RUN_PATH = re.compile(r"^(?:/threads/(?P<thread>[^/]+))?/runs(?:/wait|/stream)?/?$")


async def _reply(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def checked_body(headers: list[tuple[bytes, bytes]], body: bytes,
                       thread_id: str | None = None) -> tuple[int, str, bytes]:
    """``(200, "", new body)`` for a run request that may go ahead (its context replaced), else ``(status, why, b"")``.
    ``thread_id``: the thread of the request's path (None for a thread-less run); a customer's run records its
    owner there. A body that is not a JSON object is passed on unchanged (Aegra answers 422)."""
    try:
        claims = await authenticate(headers)
        kind, pid, tenant, roles = principal_claims(claims)
    except Exception as exc:  # noqa: BLE001 - langgraph_sdk's Auth HTTPException carries status and detail
        return int(getattr(exc, "status_code", 401)), str(getattr(exc, "detail", exc)), b""
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        return 200, "", body
    if not isinstance(data, dict):
        return 200, "", body
    reason = check_run_request(kind, data)
    if reason:
        return 403, reason, b""
    try:
        await checked_owner(thread_id, kind, pid, tenant)
    except Exception as exc:  # noqa: BLE001 - 404 (another customer's thread) or 503 (store unavailable)
        return int(getattr(exc, "status_code", 503)), str(getattr(exc, "detail", exc)), b""
    data["context"] = run_context_for(kind, pid, tenant, roles, data.get("context"))
    return 200, "", json.dumps(data).encode()


class RunGuard:
    """ASGI middleware: see the module doc. Other requests pass untouched."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        match = RUN_PATH.match(scope.get("path", "")) if scope.get("type") == "http" else None
        if scope.get("method") != "POST" or match is None:
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        status, why, new_body = await checked_body(scope.get("headers") or [], body, match.group("thread"))
        if status != 200:
            await _reply(send, status, why)
            return
        scope = {**scope, "headers": [(k, v) for k, v in scope.get("headers") or [] if k.lower() != b"content-length"]
                 + [(b"content-length", str(len(new_body)).encode())]}
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": new_body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def __getattr__(name: str) -> Any:
    """``app``: a FastAPI app with :class:`RunGuard` (made on first access, so that importing this module does not
    need FastAPI, which comes with Aegra)."""
    if name != "app":
        raise AttributeError(f"module 'graph.aegra_app' has no attribute {name!r}")
    global _APP
    if _APP is None:
        from fastapi import FastAPI

        _APP = FastAPI()
        _APP.add_middleware(RunGuard)
    return _APP


_APP: Any = None
