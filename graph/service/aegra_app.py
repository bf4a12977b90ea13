"""The custom app ``switchboard serve`` mounts in Aegra (``aegra.json`` ``"http": {"app": …}``): one ASGI middleware
that gives every run endpoint the request checks of ``graph/service/auth.py``.

Why: Aegra 0.6 calls the ``threads.create_run`` authorization handler for ``POST /threads/{id}/runs`` only; its
``/runs/wait`` and ``/runs/stream`` skip it, so a client's run context and request shape would reach the graph
unchecked (the graph still refuses anyone but the thread's owner or a registered operator, but not a ``goto``
command). :class:`RunGuard` runs before Aegra's routes on every ``POST …/runs``, ``…/runs/wait``,
``…/runs/stream``: it authenticates the bearer token with :func:`graph.service.auth.authenticate` (401), refuses what
:func:`graph.service.auth.check_run_request` refuses (403), and replaces the body's ``context`` with the authenticated
principal's (:func:`graph.service.auth.run_context_for`) and its ``config`` with the server's
(:func:`graph.service.auth.server_run_config`:
the server's recursion limit) before passing the request on; a customer's run on a thread records
the customer as the thread's owner first (:func:`graph.service.auth.checked_owner`: 404 when the thread is another
customer's). Aegra then authenticates again.

Aegra 0.6 also asks no handler at all for the routes that write a thread outside a run: ``POST /threads/{id}/state``
with ``values`` or ``as_node`` (``threads.update_state``), and cancelling, interrupting (``PATCH``) or deleting one
of the thread's runs. The LangGraph API asks ``threads.update`` / ``threads.delete`` for them; :class:`RunGuard`
gives Aegra the same answers: run cancellation and deletion are for admins (401 without a valid token, 403 ``only an
admin may …`` for anyone else, :func:`admin_refusal`), a state write is refused for everyone (403,
:func:`state_write_refusal`). A ``POST …/state`` without ``values`` is a read and passes.

The app also carries ``graph.service.view_guard.ViewGuard`` (outermost): what a customer's token reads of a thread — state,
history, threads, run outputs, stream events — is the customer's view (``graph.contracts.views``), as on the LangGraph API.

Beyond the handlers, the guard makes Aegra answer what happened, as the LangGraph API does:

* a **resume** is checked against the business store before Aegra creates a run (:func:`graph.service.auth.checked_decision`:
  403 / 422 / 409), so a refused decision never becomes a failed run — Aegra marks the thread of a failed run
  ``error`` and from then on refuses every resume of it ("thread is not in interrupted state"), the right approver's
  too;
* a run on a thread **busy** with another turn (its turn lock held, ``checkpoints.engine_tables.thread_lock_held``) is
  409 before it is created (Aegra 0.6 ignores ``multitask_strategy``; the graph would fail the run,
  ``nodes.thread_guard``). A run that fails anyway (a race the checks could not see) is not answered ``200 {}``:
  ``/runs/wait`` tags the run (config ``metadata.switchboard_request``) and, when Aegra returns an empty output for
  it, answers with the run's failure (:func:`failure_status`: 403 / 409 / 422 / 503 / 500, JSON);
* a **thread-less run** (``/runs``, ``/runs/wait``, ``/runs/stream``) is 422 (:data:`graph.service.auth.NO_THREAD`), as on the
  LangGraph API;
* **creating a thread** (``POST /threads``): the guard picks the id when the client gave none and records the customer
  as its owner in the business store before Aegra creates it, so nobody else can take the thread over before its
  first run; an id that exists — the caller's or another customer's, in Aegra's table or the business store — is 409
  ``Thread … already exists`` (the LangGraph API's words, which say nothing of whose it is), never Aegra's 500 with
  the SQL error; ``if_exists: do_nothing`` returns the caller's own thread and still 409 for another's.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from typing import Any
from urllib.parse import unquote

from graph.service.auth import (
    NO_THREAD,
    STATE_WRITE_REFUSED,
    authenticate,
    check_run_request,
    checked_decision,
    checked_owner,
    input_refusal,
    principal_claims,
    require_admin,
    run_context_for,
    server_run_config,
)

__all__ = ["RunGuard", "checked_body", "admin_refusal", "checked_thread_create", "failure_status", "REQUEST_TAG"]
# and `app`, made on first access (module __getattr__)

#: The config metadata key under which the guard tags the run of a ``/runs/wait`` request (to find its failure).
REQUEST_TAG = "switchboard_request"

#: The run endpoints: with or without a thread, create / wait / stream.
RUN_PATH = re.compile(r"^(?:/threads/[^/]+)?/runs(?:/wait|/stream)?/?$")
#: The thread id of a ``/threads/{id}/…`` path.
THREAD_OF_PATH = re.compile(r"^/threads/([^/]+)/")
#: ``POST``: read the thread's state, or (with ``values`` / ``as_node``) write it.
STATE_PATH = re.compile(r"^/threads/[^/]+/state/?$")
#: One run of a thread: ``PATCH`` (interrupt), ``DELETE``; with ``/cancel``: ``POST``.
RUN_ITEM_PATH = re.compile(r"^/threads/[^/]+/runs/(?!wait/?$|stream/?$)[^/]+/?$")
RUN_CANCEL_PATH = re.compile(r"^/threads/[^/]+/runs/[^/]+/cancel/?$")
#: ``POST``: create a thread.
THREADS_PATH = re.compile(r"^/threads/?$")
#: ``POST``: create a run on a thread and wait for its output.
WAIT_PATH = re.compile(r"^/threads/[^/]+/runs/wait/?$")


def _db() -> str | None:
    """The PostgreSQL database Aegra and our stores share (``SWITCHBOARD_DB``), or None elsewhere."""
    from graph.contracts.settings import Settings, is_postgres

    db = str(Settings().db)
    return db if is_postgres(db) else None


def _error(exc: Exception, default: int) -> tuple[int, str]:
    """``(status, detail)`` of langgraph_sdk's Auth HTTPException (or ``default`` and the text of another error)."""
    return int(getattr(exc, "status_code", default)), str(getattr(exc, "detail", exc))


async def _reply(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def checked_body(headers: list[tuple[bytes, bytes]], body: bytes,
                       thread_id: str | None = None) -> tuple[int, str, bytes]:
    """``(200, "", new body)`` for a run request that may go ahead (its context and run config replaced:
    :func:`graph.service.auth.run_context_for`, :func:`graph.service.auth.server_run_config`), else ``(status, why, b"")``:
    401 / 403 as the auth handlers (a customer's cancel before they confirmed it too,
    :func:`graph.service.auth.checked_decision`),
    422 for a message or a ``thread_id`` (of the path) the input rules refuse (:func:`graph.service.auth.input_refusal`) and
    for a thread-less run, 404 for another customer's thread, 403 / 422 / 409 for a resume the business store refuses
    (:func:`graph.service.auth.checked_decision`), 409 for a thread busy with another turn. ``thread_id``: the thread of the
    request's path (None for a thread-less run); a customer's run records its owner there once its input passed. A
    body that is not a JSON object is passed on unchanged (Aegra answers 422)."""
    try:
        claims = await authenticate(headers)
        kind, pid, tenant, roles = principal_claims(claims)
    except Exception as exc:  # noqa: BLE001 - langgraph_sdk's Auth HTTPException carries status and detail
        return (*_error(exc, 401), b"")
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
        return (*_error(exc, 422), b"")
    if not thread_id:
        return 422, NO_THREAD, b""
    try:
        await checked_owner(thread_id, kind, pid, tenant)
        await checked_decision(thread_id, kind, pid, tenant, roles, data.get("command"))
    except Exception as exc:  # noqa: BLE001 - 404 / 403 / 409 / 422 (refused), 503 (store unavailable)
        return (*_error(exc, 503), b"")
    busy = await _busy(thread_id)
    if busy:
        return 409, busy, b""
    data["context"] = run_context_for(kind, pid, tenant, roles, data.get("context"))
    data["config"] = server_run_config(data.get("config"))
    return 200, "", json.dumps(data).encode()


async def _busy(thread_id: str) -> str:
    """Why a run on ``thread_id`` must wait ("" when its turn lock is free, or off PostgreSQL): Aegra queues nothing,
    so any holder of the lock counts (:func:`graph.service.auth.busy_refusal`)."""
    from graph.service.auth import busy_refusal

    return await asyncio.to_thread(busy_refusal, thread_id, False)


def failure_status(error_type: str, message: str) -> tuple[int, str]:
    """``(HTTP status, detail)`` for a run that failed with ``error_type`` (the exception's class name) and
    ``message``: ``AccessDenied`` 403; ``InputError`` 409 when the thread was busy with another turn, else 422;
    ``InfrastructureError``/``ConfigError`` 503; anything else 500 naming only the class (its text may hold
    internals)."""
    if error_type == "AccessDenied":
        return 403, message
    if error_type == "InputError":
        return (409 if "busy with another turn" in message else 422), message
    if error_type in ("InfrastructureError", "ConfigError", "StorageUnavailable"):
        return 503, f"the run could not reach a store ({error_type}); try again"
    return 500, f"the run failed ({error_type})"


async def checked_thread_create(headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, str, bytes]:
    """``(200, "", new body)`` for a ``POST /threads`` that may go on to Aegra, else ``(status, why, b"")`` (module
    doc): 409 ``Thread … already exists`` for an id that exists (another user's in Aegra's table, another customer's
    in the business store, or the caller's own unless ``if_exists`` is ``do_nothing``), 422 for a malformed id, 503
    when a store cannot be reached. A customer's thread gets its id here when the body has none, and the customer is
    recorded as its owner before Aegra creates it. Anything the guard cannot judge (no valid token, not a JSON
    object, an operator) passes unchanged: Aegra and its handler answer it."""
    from checkpoints.engine_tables import aegra_thread_user
    from graph.contracts.errors import InfrastructureError
    from graph.service.auth import claimed_thread

    try:
        kind, pid, tenant, _ = principal_claims(await authenticate(headers))
        data = json.loads(body or b"{}")
    except Exception:  # noqa: BLE001 - Aegra authenticates again and answers
        return 200, "", body
    if not isinstance(data, dict) or kind != "customer":
        return 200, "", body
    given = data.get("thread_id") or data.get("threadId")
    thread_id = str(given) if given else str(uuid.uuid4())
    try:
        input_refusal(None, thread_id)
    except Exception as exc:  # noqa: BLE001 - langgraph_sdk's Auth HTTPException carries status and detail
        return (*_error(exc, 422), b"")
    exists = f"Thread {thread_id} already exists"
    db = _db()
    try:
        creator = await asyncio.to_thread(aegra_thread_user, db, thread_id) if db and given else None
    except InfrastructureError as exc:
        return 503, str(exc), b""
    if creator is not None and (creator != f"customer:{pid}" or data.get("if_exists") != "do_nothing"):
        return 409, exists, b""
    try:
        await claimed_thread(thread_id, pid, tenant)
    except Exception as exc:  # noqa: BLE001 - 409 (another customer's id) or 503
        return (*_error(exc, 503), b"")
    data.pop("threadId", None)
    data["thread_id"] = thread_id
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


async def state_write_refusal(headers: list[tuple[bytes, bytes]]) -> tuple[int, str]:
    """``(401, why)`` without a valid token, else ``(403, why)``: a state write is refused for everyone, admins
    included (the compiled graph refuses it too, ``nodes.run_gate``)."""
    try:
        await authenticate(headers)
    except Exception as exc:  # noqa: BLE001 - langgraph_sdk's Auth HTTPException carries status and detail
        return int(getattr(exc, "status_code", 401)), str(getattr(exc, "detail", exc))
    return 403, STATE_WRITE_REFUSED


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
        if method != "POST" or not (RUN_PATH.match(path) or STATE_PATH.match(path) or THREADS_PATH.match(path)):
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if THREADS_PATH.match(path):
            status, why, new_body = await checked_thread_create(headers, body)
            if status != 200:
                await _reply(send, status, why)
                return
            # an id taken between the check and Aegra's insert (a concurrent create) surfaces as Aegra's 500
            thread_id = json.loads(new_body).get("thread_id") if new_body.startswith(b"{") else None
            await self.app(_with_length(scope, new_body), _replay(new_body, receive),
                           _conflict_on_500(send, f"Thread {thread_id} already exists"))
            return
        if STATE_PATH.match(path):
            status, why = (await state_write_refusal(headers)) if _writes_state(body) else (200, "")
            if status != 200:
                await _reply(send, status, why)
            else:
                await self.app(scope, _replay(body, receive), send)
            return
        thread = THREAD_OF_PATH.match(path)
        thread_id = unquote(thread.group(1)) if thread else None
        status, why, new_body = await checked_body(headers, body, thread_id)
        if status != 200:
            await _reply(send, status, why)
            return
        if WAIT_PATH.match(path) and thread_id and new_body.startswith(b"{"):
            tag = uuid.uuid4().hex
            data = json.loads(new_body)
            config = data.get("config") if isinstance(data.get("config"), dict) else {}
            config["metadata"] = {**(config.get("metadata") or {}), REQUEST_TAG: tag}
            data["config"] = config
            new_body = json.dumps(data).encode()
            send = _failure_aware(send, thread_id, tag)
        await self.app(_with_length(scope, new_body), _replay(new_body, receive), send)


def _with_length(scope: dict, body: bytes) -> dict:
    """``scope`` with its ``content-length`` header set to ``len(body)`` (the guard may have rewritten the body)."""
    headers = [(k, v) for k, v in scope.get("headers") or [] if k.lower() != b"content-length"]
    return {**scope, "headers": headers + [(b"content-length", str(len(body)).encode())]}


def _buffered(send: Any, decide: Any) -> Any:
    """An ASGI ``send`` that holds the response (start and body) until its last chunk, then sends
    ``await decide(status, body)``: None to send it as it was, or ``(status, detail)`` to send a JSON error instead.
    For the small JSON answers of ``POST /threads`` and ``/runs/wait`` only."""
    start: dict = {}
    chunks: list[bytes] = []

    async def wrapped(message: dict) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
            return
        if message["type"] != "http.response.body":
            await send(message)
            return
        chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        body = b"".join(chunks)
        instead = await decide(int(start.get("status", 200)), body)
        if instead is not None:
            await _reply(send, *instead)
            return
        await send(start)
        await send({"type": "http.response.body", "body": body})

    return wrapped


def _conflict_on_500(send: Any, detail: str) -> Any:
    async def decide(status: int, body: bytes) -> tuple[int, str] | None:
        return (409, detail) if status == 500 else None

    return _buffered(send, decide)


def _failure_aware(send: Any, thread_id: str, tag: str) -> Any:
    """``send`` for a ``/runs/wait`` whose run was tagged ``tag``: Aegra answers a failed run with ``200`` and its empty
    output; the failure is read back from Aegra's tables and answered instead (:func:`failure_status`). A run of the
    desk's graph that ends well always has state values, so only an empty object is looked up."""
    async def decide(status: int, body: bytes) -> tuple[int, str] | None:
        from checkpoints.engine_tables import aegra_run_failure

        if status != 200 or body.strip() != b"{}":
            return None
        db = _db()
        try:
            failed = await asyncio.to_thread(aegra_run_failure, db, thread_id, REQUEST_TAG, tag) if db else None
        except Exception:  # noqa: BLE001 - without the record, Aegra's answer stands
            return None
        return failure_status(*failed) if failed is not None else None

    return _buffered(send, decide)


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
    """``app``: a FastAPI app with :class:`RunGuard` and, around it, ``graph.service.view_guard.ViewGuard`` (made on first
    access, so that importing this module does not need FastAPI, which comes with Aegra)."""
    if name != "app":
        raise AttributeError(f"module 'graph.service.aegra_app' has no attribute {name!r}")
    global _APP
    if _APP is None:
        from fastapi import FastAPI

        from graph.service.view_guard import ViewGuard

        _APP = FastAPI()
        _APP.add_middleware(RunGuard)
        _APP.add_middleware(ViewGuard)  # added last: the outermost, so it sees RunGuard's replies too
    return _APP


_APP: Any = None
