"""The custom app ``switchboard serve`` mounts in Aegra (``aegra.json`` ``"http": {"app": …}``): one ASGI middleware
that gives every run endpoint the request checks of ``graph/auth.py``.

Why: Aegra 0.6 calls the ``threads.create_run`` authorization handler for ``POST /threads/{id}/runs`` only; its
``/runs/wait`` and ``/runs/stream`` skip it, so a client's run context and request shape would reach the graph
unchecked (the graph still refuses anyone but the thread's owner or a registered operator, but not a ``goto``
command). :class:`RunGuard` runs before Aegra's routes on every ``POST …/runs``, ``…/runs/wait``,
``…/runs/stream``: it authenticates the bearer token with :func:`graph.auth.authenticate` (401), refuses what
:func:`graph.auth.check_run_request` refuses (403), and replaces the body's ``context`` with the authenticated
principal's (:func:`graph.auth.run_context_for`) and its ``config`` with the server's (:func:`graph.auth.server_run_config`:
the server's recursion limit) before passing the request on; a customer's run on a thread records
the customer as the thread's owner first (:func:`graph.auth.checked_owner`: 404 when the thread is another
customer's). Aegra then authenticates again.

Aegra 0.6 also asks no handler at all for the routes that write a thread outside a run: ``POST /threads/{id}/state``
with ``values`` or ``as_node`` (``threads.update_state``), and cancelling, interrupting (``PATCH``) or deleting one
of the thread's runs. The LangGraph API asks ``threads.update`` / ``threads.delete`` for them, which admit admins
only; :class:`RunGuard` gives Aegra the same answer (401 without a valid token, 403 ``only an admin may …`` for
anyone else, :func:`admin_refusal`). A ``POST …/state`` without ``values`` is a read and passes.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

from graph.auth import (
    authenticate,
    check_run_request,
    checked_owner,
    input_refusal,
    principal_claims,
    require_admin,
    run_context_for,
    server_run_config,
)

__all__ = ["RunGuard", "checked_body", "admin_refusal"]  # and `app`, made on first access (module __getattr__)

#: The run endpoints: with or without a thread, create / wait / stream.
RUN_PATH = re.compile(r"^(?:/threads/[^/]+)?/runs(?:/wait|/stream)?/?$")
#: The thread id of a ``/threads/{id}/…`` path.
THREAD_OF_PATH = re.compile(r"^/threads/([^/]+)/")
#: ``POST``: read the thread's state, or (with ``values`` / ``as_node``) write it.
STATE_PATH = re.compile(r"^/threads/[^/]+/state/?$")
#: One run of a thread: ``PATCH`` (interrupt), ``DELETE``; with ``/cancel``: ``POST``.
RUN_ITEM_PATH = re.compile(r"^/threads/[^/]+/runs/(?!wait/?$|stream/?$)[^/]+/?$")
RUN_CANCEL_PATH = re.compile(r"^/threads/[^/]+/runs/[^/]+/cancel/?$")


async def _reply(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def checked_body(headers: list[tuple[bytes, bytes]], body: bytes,
                       thread_id: str | None = None) -> tuple[int, str, bytes]:
    """``(200, "", new body)`` for a run request that may go ahead (its context and run config replaced:
    :func:`graph.auth.run_context_for`, :func:`graph.auth.server_run_config`), else ``(status, why, b"")``:
    401 / 403 as the auth handlers, 422 for a message or a ``thread_id`` (of the path) the input rules refuse
    (:func:`graph.auth.input_refusal`), 404 for another customer's thread. ``thread_id``: the thread of the request's
    path (None for a thread-less run); a customer's run records its owner there once its input passed. A body that
    is not a JSON object is passed on unchanged (Aegra answers 422)."""
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
        input_refusal(data.get("input"), thread_id)
    except Exception as exc:  # noqa: BLE001 - langgraph_sdk's Auth HTTPException carries status and detail
        return int(getattr(exc, "status_code", 422)), str(getattr(exc, "detail", exc)), b""
    try:
        await checked_owner(thread_id, kind, pid, tenant)
    except Exception as exc:  # noqa: BLE001 - 404 (another customer's thread) or 503 (store unavailable)
        return int(getattr(exc, "status_code", 503)), str(getattr(exc, "detail", exc)), b""
    data["context"] = run_context_for(kind, pid, tenant, roles, data.get("context"))
    data["config"] = server_run_config(data.get("config"))
    return 200, "", json.dumps(data).encode()


def _admin_only(method: str, path: str) -> str | None:
    """What an admin-only route without a body check does (for the 403 text), or None."""
    if method == "POST" and RUN_CANCEL_PATH.match(path):
        return "cancel a run"
    if method in ("PATCH", "DELETE") and RUN_ITEM_PATH.match(path):
        return "interrupt or delete a run"
    return None


def _writes_state(body: bytes) -> bool:
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        return True  # not for Aegra to guess: refused like a write
    return not isinstance(data, dict) or data.get("values") is not None or data.get("as_node") is not None


async def admin_refusal(headers: list[tuple[bytes, bytes]], what: str) -> tuple[int, str]:
    """``(200, "")`` when the bearer token is an admin operator's, else ``(401 | 403, why)`` (module doc)."""
    try:
        require_admin(await authenticate(headers), what)
    except Exception as exc:  # noqa: BLE001 - langgraph_sdk's Auth HTTPException carries status and detail
        return int(getattr(exc, "status_code", 401)), str(getattr(exc, "detail", exc))
    return 200, ""


async def _read_body(receive: Any) -> bytes:
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


class RunGuard:
    """ASGI middleware: see the module doc. Other requests pass untouched."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        method, path = scope.get("method"), scope.get("path", "")
        headers = scope.get("headers") or []
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        if what := _admin_only(str(method), path):
            status, why = await admin_refusal(headers, what)
            if status != 200:
                await _reply(send, status, why)
                return
            await self.app(scope, receive, send)
            return
        if method != "POST" or not (RUN_PATH.match(path) or STATE_PATH.match(path)):
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if STATE_PATH.match(path):
            status, why = (await admin_refusal(headers, "update a thread's state")) if _writes_state(body) else (200, "")
            if status != 200:
                await _reply(send, status, why)
            else:
                await self.app(scope, _replay(body, receive), send)
            return
        thread = THREAD_OF_PATH.match(path)
        status, why, new_body = await checked_body(headers, body, unquote(thread.group(1)) if thread else None)
        if status != 200:
            await _reply(send, status, why)
            return
        scope = {**scope, "headers": [(k, v) for k, v in headers if k.lower() != b"content-length"]
                 + [(b"content-length", str(len(new_body)).encode())]}
        await self.app(scope, _replay(new_body, receive), send)


def _replay(body: bytes, receive: Any) -> Any:
    """An ASGI ``receive`` that hands out ``body`` once, then defers to the original ``receive``."""
    replayed = False

    async def replay() -> dict:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


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
