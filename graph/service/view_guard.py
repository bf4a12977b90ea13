"""What a customer's token reads over HTTP: the customer's view of a thread (``graph.contracts.views``) on every engine.

The LangGraph API (``langgraph dev``, LangGraph's Agent Server, ``--engine langgraph-pg``) and Aegra have no hook that
filters what a thread's state, history or run output returns: authorization handlers (``graph/service/auth.py``) decide
*whether* a principal may read a thread, never *what* of it. The graph's output schema cannot do it either: it would
cut the same keys for operators, the Python API and the CLI, and it cannot reach into ``pending_approval`` or the
interrupts. So :class:`ViewGuard`, an ASGI middleware, rewrites the engines' responses for **customer** principals
(the bearer token is authenticated with :func:`graph.service.auth.authenticate`; operators' and unauthenticated requests pass
untouched, and the engine answers those itself):

* thread state — ``GET /threads/{id}/state[/{checkpoint_id}]``, ``POST /threads/{id}/state`` (a read) and
  ``POST /threads/{id}/state/checkpoint``; history — ``GET|POST /threads/{id}/history`` (a list of states): ``values``
  becomes :func:`graph.contracts.views.customer_view`, each task keeps ``id``, ``name`` and its interrupts, each interrupt
  ``id`` and :func:`graph.contracts.views.customer_request` of its value, ``metadata`` keeps :data:`METADATA_KEYS`; the
  checkpoint ids, ``next`` and ``created_at`` stay;
* threads — ``GET|PATCH /threads/{id}``, ``POST /threads``, ``GET /threads`` (Aegra's list), ``POST /threads/search``:
  :data:`THREAD_KEYS`, with ``values`` and ``interrupts`` as above (the thread's ``config`` is left out);
* run outputs — ``POST [/threads/{id}]/runs/wait``, ``GET /threads/{id}/runs/{run_id}/join``: the customer's view of
  the values, ``__interrupt__`` reduced as above, ``__error__`` as it is;
* runs — ``POST [/threads/{id}]/runs``, ``POST /runs/batch``, ``GET /threads/{id}/runs[/{run_id}]``: :data:`RUN_KEYS`
  (the request's input, command — an approver's resume carries their note —, config and context are left out; Aegra's
  ``output`` is a run output as above);
* every ``text/event-stream`` response (``…/runs/stream``, ``…/runs/{run_id}/stream``, ``/threads/{id}/stream``):
  ``values`` events become run outputs as above; ``metadata``, ``error`` and ``end`` events and comments pass; every
  other event (updates, messages, custom events, debug, checkpoints, tasks) is dropped. A customer's run may ask for
  ``values`` only (``graph.service.auth.CUSTOMER_STREAM_MODES``, 403 otherwise), so dropping matters only when a customer
  joins a run someone else started with other modes.

A customer's request is sent on without ``Accept-Encoding``, so no engine compresses what this layer must read.
Everything else (assistants, ``/ok``, errors: any status outside 2xx) passes unchanged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from graph.contracts.views import customer_request, customer_view

__all__ = ["ViewGuard", "customer_response", "customer_state", "customer_thread", "customer_run", "customer_output",
           "customer_interrupt", "SseFilter", "METADATA_KEYS", "THREAD_KEYS", "RUN_KEYS"]  # and `app` (module getattr)

#: Paths whose responses may carry a thread's state (the rest pass without authenticating here).
WATCHED = re.compile(r"^/(?:threads|runs)(?:/|$)")
STATE_PATH = re.compile(r"^/threads/[^/]+/state(?:/[^/]+)?/?$")
HISTORY_PATH = re.compile(r"^/threads/[^/]+/history/?$")
THREADS_PATH = re.compile(r"^/threads/?$")
SEARCH_PATH = re.compile(r"^/threads/search/?$")
THREAD_PATH = re.compile(r"^/threads/(?!search/?$|count/?$|prune/?$)[^/]+/?$")
OUTPUT_PATH = re.compile(r"^(?:/threads/[^/]+)?/runs/wait/?$|^/threads/[^/]+/runs/[^/]+/join/?$")
RUNS_PATH = re.compile(r"^(?:/threads/[^/]+)?/runs(?:/batch)?/?$|^/threads/[^/]+/runs/(?!wait/?$|stream/?$)[^/]+/?$")

#: Checkpoint metadata a customer reads (what step of which run made it); the rest — the run's configurable,
#: the authenticated user of the run (an approver's claims on their resume), the request's metadata — is left out.
METADATA_KEYS: tuple[str, ...] = ("source", "step", "parents", "run_id", "thread_id", "graph_id", "assistant_id")
#: The keys of a thread object a customer reads.
THREAD_KEYS: tuple[str, ...] = ("thread_id", "created_at", "updated_at", "metadata", "status", "values",
                                "interrupts")
#: The keys of a run object a customer reads (Aegra's ``output`` becomes :func:`customer_output`).
RUN_KEYS: tuple[str, ...] = ("run_id", "thread_id", "assistant_id", "status", "created_at", "updated_at",
                             "multitask_strategy", "output")
_STATE_KEYS = ("values", "next", "tasks", "metadata", "created_at", "checkpoint", "parent_checkpoint",
               "checkpoint_id", "parent_checkpoint_id", "interrupts")
#: Stream events a customer receives besides ``values`` (rewritten): run metadata, errors, the end marker.
_PASSING_EVENTS = frozenset({"metadata", "error", "end"})


def customer_interrupt(interrupt: Any) -> Any:
    """One interrupt (``{"value", "id", …}``) as a customer reads it: ``id`` and the customer's view of ``value``."""
    if not isinstance(interrupt, Mapping):
        return interrupt
    return {k: v for k, v in (("id", interrupt.get("id")), ("value", customer_request(interrupt.get("value"))))
            if k == "value" or v is not None}


def _interrupts(value: Any) -> Any:
    """A list of interrupts, or the LangGraph API thread's ``{task_id: [interrupt, …]}``, reduced."""
    if isinstance(value, list):
        return [customer_interrupt(i) for i in value]
    if isinstance(value, Mapping):
        return {k: _interrupts(v) for k, v in value.items()}
    return value


def customer_output(doc: Any) -> Any:
    """A run output (the final values, maybe with ``__interrupt__`` / ``__error__``) as a customer reads it."""
    if not isinstance(doc, Mapping):
        return doc
    out: dict[str, Any] = customer_view(doc)
    if "__interrupt__" in doc:
        out["__interrupt__"] = _interrupts(doc["__interrupt__"])
    if "__error__" in doc:
        out["__error__"] = doc["__error__"]
    return out


def customer_state(doc: Any) -> Any:
    """A thread state (``ThreadState``: values, next, tasks, metadata, checkpoints) as a customer reads it."""
    if not isinstance(doc, Mapping):
        return doc
    out = {k: doc[k] for k in _STATE_KEYS if k in doc}
    if "values" in out:
        out["values"] = customer_view(out["values"]) if isinstance(out["values"], Mapping) else out["values"]
    if isinstance(out.get("tasks"), list):
        out["tasks"] = [{"id": t.get("id"), "name": t.get("name"), "interrupts": _interrupts(t.get("interrupts") or [])}
                        if isinstance(t, Mapping) else t for t in out["tasks"]]
    if "interrupts" in out:
        out["interrupts"] = _interrupts(out["interrupts"])
    if isinstance(out.get("metadata"), Mapping):
        out["metadata"] = {k: out["metadata"][k] for k in METADATA_KEYS if k in out["metadata"]}
    return out


def customer_thread(doc: Any) -> Any:
    """A thread object as a customer reads it (:data:`THREAD_KEYS`)."""
    if not isinstance(doc, Mapping):
        return doc
    out = {k: doc[k] for k in THREAD_KEYS if k in doc}
    if isinstance(out.get("values"), Mapping):
        out["values"] = customer_view(out["values"])
    if "interrupts" in out:
        out["interrupts"] = _interrupts(out["interrupts"])
    return out


def customer_run(doc: Any) -> Any:
    """A run object as a customer reads it (:data:`RUN_KEYS`)."""
    if not isinstance(doc, Mapping):
        return doc
    out = {k: doc[k] for k in RUN_KEYS if k in doc}
    if isinstance(out.get("output"), Mapping):
        out["output"] = customer_output(out["output"])
    return out


def _each(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def over(doc: Any) -> Any:
        if isinstance(doc, list):
            return [fn(x) for x in doc]
        if isinstance(doc, Mapping) and isinstance(doc.get("threads"), list):  # Aegra's GET /threads: {threads, …}
            return {**doc, "threads": [fn(x) for x in doc["threads"]]}
        return fn(doc)
    return over


def _rule(method: str, path: str) -> Callable[[Any], Any] | None:
    """How a JSON response of ``method path`` is rewritten for a customer, or None (passed as it is)."""
    if OUTPUT_PATH.match(path):
        return customer_output
    if STATE_PATH.match(path):
        return customer_state
    if HISTORY_PATH.match(path):
        return _each(customer_state)
    if SEARCH_PATH.match(path) or THREADS_PATH.match(path) or (THREAD_PATH.match(path) and method in ("GET", "PATCH")):
        return _each(customer_thread)
    if RUNS_PATH.match(path):
        return _each(customer_run)
    return None


def customer_response(method: str, path: str, body: bytes) -> bytes:
    """The JSON ``body`` of a 2xx response to a customer's ``method path`` in its customer form (module doc); a body
    that is not JSON, or of a path without a rule, is returned as it is."""
    rule = _rule(method, path)
    if rule is None:
        return body
    try:
        doc = json.loads(body or b"null")
    except ValueError:
        return body
    return json.dumps(rule(doc), ensure_ascii=False, separators=(",", ":")).encode()


class SseFilter:
    """A ``text/event-stream`` body, chunk by chunk, as a customer receives it (module doc): :meth:`feed` returns the
    bytes to send for a chunk (complete events only; a partial event waits for its end), :meth:`close` the rest."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._buf + chunk
        hold = b""
        if data.endswith(b"\r"):  # a CRLF split across chunks: keep the CR for the next one
            data, hold = data[:-1], b"\r"
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *events, rest = data.split(b"\n\n")
        self._buf = rest + hold
        return b"".join(self._event(e) for e in events)

    def close(self) -> bytes:
        rest, self._buf = self._buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n").strip(b"\n"), b""
        return self._event(rest) if rest else b""

    @staticmethod
    def _event(block: bytes) -> bytes:
        lines = block.decode("utf-8", "replace").split("\n")
        fields: list[tuple[str, str]] = []
        for line in lines:
            if not line:
                continue
            name, _, value = line.partition(":")
            fields.append((name, value[1:] if value.startswith(" ") else value))
        names = {n for n, _ in fields if n}
        if not names:  # comments only (keep-alives)
            return block + b"\n\n"
        event = next((v for n, v in fields if n == "event"), "message")
        data = "\n".join(v for n, v in fields if n == "data")
        if event == "values":
            try:
                data = json.dumps(customer_output(json.loads(data)), ensure_ascii=False, separators=(",", ":"))
            except ValueError:
                return b""
        elif event not in _PASSING_EVENTS:
            return b""
        out = [f"{n}: {v}" for n, v in fields if n not in ("data", "")]
        out += [f"data: {line}" for line in data.split("\n")] if data or "data" in names else []
        return ("\n".join(out) + "\n\n").encode()


async def _customer(headers: list[tuple[bytes, bytes]]) -> bool:
    """Is the request's bearer token a customer's? (False when it is an operator's, or no valid token at all: the
    engine answers that request itself.)"""
    from graph.service.auth import authenticate, principal_claims

    try:
        kind, _, _, _ = principal_claims(await authenticate(headers))
    except Exception:  # noqa: BLE001 - langgraph_sdk's Auth HTTPException (401/403): the engine refuses it too
        return False
    return kind == "customer"


class _CustomerSend:
    """The ``send`` of a customer's response: buffers a JSON body of a rewritten route, filters an event stream."""

    def __init__(self, send: Any, method: str, path: str):
        self.send, self.method, self.path = send, method, path
        self.mode = "pass"
        self.start: dict | None = None
        self.body = b""
        self.sse = SseFilter()

    async def __call__(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "http.response.start":
            headers = message.get("headers") or []
            ctype = next((v for k, v in headers if k.lower() == b"content-type"), b"").lower()
            status = int(message.get("status") or 0)
            if ctype.startswith(b"text/event-stream"):
                self.mode = "sse"
                message = {**message, "headers": [(k, v) for k, v in headers if k.lower() != b"content-length"]}
            elif 200 <= status < 300 and ctype.startswith(b"application/json") and _rule(self.method, self.path):
                self.mode, self.start = "json", message
                return
            await self.send(message)
            return
        if kind != "http.response.body" or self.mode == "pass":
            await self.send(message)
            return
        more = bool(message.get("more_body", False))
        chunk = message.get("body", b"")
        if self.mode == "sse":
            out = self.sse.feed(chunk) + (b"" if more else self.sse.close())
            if out or not more:
                await self.send({"type": "http.response.body", "body": out, "more_body": more})
            return
        self.body += chunk
        if more:
            return
        body = customer_response(self.method, self.path, self.body)
        start = self.start or {"type": "http.response.start", "status": 200, "headers": []}
        headers = [(k, v) for k, v in start.get("headers") or [] if k.lower() != b"content-length"]
        await self.send({**start, "headers": headers + [(b"content-length", str(len(body)).encode())]})
        await self.send({"type": "http.response.body", "body": body, "more_body": False})


class ViewGuard:
    """ASGI middleware: customers' responses in the customer's view (module doc); everything else untouched."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope.get("type") != "http" or not WATCHED.match(path):
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        if not await _customer(headers):
            await self.app(scope, receive, send)
            return
        scope = {**scope, "headers": [(k, v) for k, v in headers if k.lower() != b"accept-encoding"]}
        await self.app(scope, receive, _CustomerSend(send, str(scope.get("method") or "GET"), path))


class _ApiViewGuard(ViewGuard):
    """:class:`ViewGuard` as the middleware of the LangGraph API's custom app (:data:`app`), which the API makes its
    own app: the lifespan event goes straight to the app's router, past the middleware the API adds after ours.

    Why: with a custom app the LangGraph API adds ``EnsureStoreAccessible``, which opens the LangGraph store on the
    first event it sees — the lifespan's startup, before the lifespan has started anything. The PostgreSQL runtime's
    store needs the pool the lifespan opens (langgraph-api 0.11.1 with langgraph-runtime-pg 0.11.1: "Store requires
    setup_store()/start_pool() first"; uvicorn then takes the lifespan as unsupported and every request fails). The
    lifespan then runs as it does without a custom app (the API adds that middleware only for custom apps); HTTP
    requests pass it as before, once the pool is open."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") == "lifespan" and _APP is not None:
            await _APP.router(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def __getattr__(name: str) -> Any:
    """``app``: the custom app ``langgraph.json`` names (``"http": {"app": "graph.service.view_guard:app"}``) — a Starlette app
    with no routes of its own and :class:`ViewGuard` as its middleware, which the LangGraph API applies to every route
    (made on first access, so importing this module needs no Starlette). Aegra mounts ``graph.service.aegra_app:app``
    instead, which carries :class:`ViewGuard` itself."""
    if name != "app":
        raise AttributeError(f"module 'graph.service.view_guard' has no attribute {name!r}")
    global _APP
    if _APP is None:
        from starlette.applications import Starlette
        from starlette.middleware import Middleware

        _APP = Starlette(middleware=[Middleware(_ApiViewGuard)])
    return _APP


_APP: Any = None
