"""A local OpenAI-compatible chat-completions server that replays a script and checks every request.

Tests use it to drive the real ``langchain_openai.ChatOpenAI`` -> ``openai`` client -> HTTP path
without touching the internet (it listens on 127.0.0.1 only, on a free port)::

    with ScriptedOpenAIServer([ToolCalls([ToolCall("lookup", {"q": "x"})]), Reply("done")]) as srv:
        model = ChatOpenAI(base_url=srv.base_url, api_key="test", model="stub", max_retries=0)
        ...
        assert srv.violations == []

Endpoints: ``POST /v1/chat/completions`` (JSON, or SSE when ``"stream": true``) and
``GET /v1/models``. Anything else gets an OpenAI-style 404 and is recorded in ``script_errors``.

Every chat-completions request is checked with :func:`validate_request` (the transcript rules of strict
backends such as OpenAI and vLLM, see :func:`validate_transcript`). A violating request is answered
with HTTP 400 and an OpenAI-style error body naming the violations, is recorded in ``violations``, and
does NOT consume a script step (a strict backend rejects it before generating anything).

Response shapes follow the OpenAI Chat Completions API as parsed by the installed
``langchain_openai/chat_models/base.py`` (``_create_chat_result``, ``_convert_chunk_to_generation_chunk``,
``_convert_delta_to_message_chunk``) and ``openai/_streaming.py`` (SSE ``data:`` lines, ``[DONE]``).
Retry headers: ``openai/_base_client.py`` honours ``retry-after-ms`` (preferred) and ``retry-after``
only when 0 < delay <= 120 s; otherwise it backs off 0.5 s * 2**n with jitter.

This module uses only the standard library at import time.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "Usage",
    "ToolCall",
    "Reply",
    "ToolCalls",
    "HTTPError",
    "Step",
    "Responder",
    "Exchange",
    "ScriptedOpenAIServer",
    "VALID_ROLES",
    "validate_transcript",
    "validate_tools",
    "validate_request",
    "agent_of",
    "ByAgent",
    "check_server",
    "route",
]

#: Roles accepted in ``messages`` (OpenAI Chat Completions; the legacy ``function`` role is refused).
VALID_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})

# OpenAI function names: a-z, A-Z, 0-9, underscore and dash, at most 64 characters
# (OpenAI API reference, "tools[].function.name").
_FUNCTION_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


# --------------------------------------------------------------------------------------------------
# Script steps
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """Token counts reported in a success response (OpenAI ``usage`` object).

    ``total_tokens`` is always ``prompt_tokens + completion_tokens``. Units: tokens (whatever the
    script says; the stub has no tokenizer).
    """

    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True)
class ToolCall:
    """One tool call the scripted model emits.

    ``arguments``: a dict (sent as ``json.dumps(arguments)``) or a raw string sent verbatim, which lets
    a script send malformed JSON. ``id``: the tool_call id; ``None`` means the server assigns a
    unique ``call_stub_<n>`` id. The name need not be among the request's ``tools`` (that is how a
    script sends an unknown tool).
    """

    name: str
    arguments: dict | str = field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class Reply:
    """A plain assistant text answer (``finish_reason="stop"``).

    ``usage``: reported token counts; ``None`` means a crude word count (see
    ``ScriptedOpenAIServer`` docs).
    """

    content: str
    usage: Usage | None = None


@dataclass(frozen=True)
class ToolCalls:
    """An assistant turn with one or more tool calls (several = parallel tool calls);
    ``finish_reason="tool_calls"``. ``content`` is sent as JSON null when ``None``, as real
    models do."""

    calls: tuple[ToolCall, ...]
    content: str | None = None
    usage: Usage | None = None

    def __init__(
        self,
        calls: Sequence[ToolCall],
        content: str | None = None,
        usage: Usage | None = None,
    ) -> None:
        calls = tuple(calls)
        if not calls or not all(isinstance(c, ToolCall) for c in calls):
            raise TypeError("ToolCalls needs at least one ToolCall")
        object.__setattr__(self, "calls", calls)
        object.__setattr__(self, "content", content)
        object.__setattr__(self, "usage", usage)


@dataclass(frozen=True)
class HTTPError:
    """An HTTP error answer, e.g. 429 (rate limit) or 500.

    ``body``: the JSON body; ``None`` means an OpenAI-style ``{"error": {...}}`` body.
    ``retry_after``: seconds; when given the response carries ``retry-after-ms`` (rounded ms) and
    ``retry-after`` headers. The openai client honours them only when 0 < value <= 120 s; with 0 or
    no header it backs off 0.5 s, 1 s, ... (openai/_base_client.py ``_calculate_retry_timeout``).
    """

    status: int
    body: dict | None = None
    retry_after: float | None = None

    def body_json(self) -> dict:
        if self.body is not None:
            return self.body
        kind = {429: "rate_limit_exceeded", 400: "invalid_request_error"}.get(
            self.status, "server_error" if self.status >= 500 else "api_error"
        )
        return {
            "error": {
                "message": f"scripted HTTP {self.status} from the test stub",
                "type": kind,
                "param": None,
                "code": kind,
            }
        }


Step = Reply | ToolCalls | HTTPError
#: ``responder(request_json, step_index) -> Step``; ``step_index`` counts the valid requests answered
#: before this one (0-based). Returning ``None`` means "no answer" (recorded as a script error, 500).
Responder = Callable[[dict, int], Step | None]


@dataclass(frozen=True)
class Exchange:
    """One request the server answered.

    ``request_index``: position in ``ScriptedOpenAIServer.requests`` (``None`` for routes other than
    chat completions); ``status``: the HTTP status sent; ``step``: the script step used (``None`` for
    400 violations and script errors); ``stream``: whether SSE was sent; ``retry_count``: the client's
    ``x-stainless-retry-count`` header as int (``None`` if absent).
    """

    method: str
    path: str
    request_index: int | None
    status: int
    step: Step | None
    stream: bool
    retry_count: int | None


# --------------------------------------------------------------------------------------------------
# Validation (pure functions)
# --------------------------------------------------------------------------------------------------


def _content_ok(content: Any) -> bool:
    """Content as OpenAI accepts it: a string or a list of content-part dicts with a ``type``."""
    if isinstance(content, str):
        return True
    if isinstance(content, list):
        return all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in content)
    return False


def _check_tool_calls(i: int, tool_calls: Any, seen_ids: dict[str, int]) -> tuple[list[str], list[str]]:
    """Check one assistant message's ``tool_calls``; return (violations, ids issued in order)."""
    problems: list[str] = []
    ids: list[str] = []
    if not isinstance(tool_calls, list) or not tool_calls:
        return [f"messages[{i}]: 'tool_calls' must be a non-empty list"], ids
    for j, tc in enumerate(tool_calls):
        where = f"messages[{i}].tool_calls[{j}]"
        if not isinstance(tc, dict):
            problems.append(f"{where}: must be an object")
            continue
        tc_id = tc.get("id")
        if not isinstance(tc_id, str) or not tc_id:
            problems.append(f"{where}: 'id' must be a non-empty string")
        elif tc_id in seen_ids:
            problems.append(
                f"{where}: duplicate tool_call id {tc_id!r} (already used in messages[{seen_ids[tc_id]}])"
            )
        else:
            seen_ids[tc_id] = i
            ids.append(tc_id)
        if tc.get("type") != "function":
            problems.append(f"{where}: 'type' must be 'function', got {tc.get('type')!r}")
        fn = tc.get("function")
        if not isinstance(fn, dict):
            problems.append(f"{where}: 'function' must be an object")
            continue
        if not isinstance(fn.get("name"), str) or not fn.get("name"):
            problems.append(f"{where}.function: 'name' must be a non-empty string")
        if not isinstance(fn.get("arguments"), str):
            problems.append(
                f"{where}.function: 'arguments' must be a string (JSON text), "
                f"got {type(fn.get('arguments')).__name__}"
            )
    return problems, ids


def validate_transcript(messages: Any) -> list[str]:
    """Check a chat-completions ``messages`` list the way strict backends (OpenAI, vLLM) do.

    Args:
        messages: the request's ``messages`` value (expected: a non-empty list of dicts).

    Returns:
        One human-readable violation per problem, each naming the message index
        (``"messages[3]: ..."``); an empty list when the transcript is valid. Never raises.

    Rules (from the OpenAI Chat Completions API reference and its 400 errors, e.g. "An assistant
    message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'"):

    - every message is an object whose ``role`` is one of :data:`VALID_ROLES`;
    - system/developer/user messages have string or content-part-list ``content``;
    - an assistant message has content unless it has ``tool_calls`` (then ``content`` may be null);
    - ``tool_calls`` entries have a non-empty string ``id``, ``type == "function"``, a function
      ``name`` and string ``arguments``; tool_call ids are unique across the whole transcript;
    - each assistant ``tool_calls`` block is followed, before the next non-tool message (or the end),
      by exactly one ``tool`` message per tool_call id: none missing, none duplicated;
    - a ``tool`` message must answer an id issued by the immediately preceding assistant
      ``tool_calls`` block (otherwise it is an orphan) and have string/part-list content.
    """
    if not isinstance(messages, list):
        return [f"'messages' must be a list, got {type(messages).__name__}"]
    if not messages:
        return ["'messages' must be a non-empty list"]

    problems: list[str] = []
    seen_ids: dict[str, int] = {}
    block_at: int | None = None  # index of the assistant message whose tool_calls are open
    block_ids: list[str] = []
    answered: set[str] = set()

    def close_block(before: str) -> None:
        nonlocal block_at, block_ids, answered
        if block_at is not None:
            missing = [t for t in block_ids if t not in answered]
            if missing:
                problems.append(
                    f"messages[{block_at}]: assistant tool_calls {missing} have no tool message "
                    f"before {before}"
                )
        block_at, block_ids, answered = None, [], set()

    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            problems.append(f"messages[{i}]: must be an object, got {type(msg).__name__}")
            continue
        role = msg.get("role")
        if role not in VALID_ROLES:
            problems.append(f"messages[{i}]: invalid role {role!r} (allowed: {sorted(VALID_ROLES)})")
            continue

        if role == "tool":
            tc_id = msg.get("tool_call_id")
            if not _content_ok(msg.get("content")):
                problems.append(f"messages[{i}]: tool message content must be a string or a list of parts")
            if not isinstance(tc_id, str) or not tc_id:
                problems.append(f"messages[{i}]: tool message needs a non-empty string 'tool_call_id'")
            elif block_at is None:
                problems.append(
                    f"messages[{i}]: orphan tool message (tool_call_id {tc_id!r}) does not follow an "
                    "assistant message with tool_calls"
                )
            elif tc_id not in block_ids:
                problems.append(
                    f"messages[{i}]: orphan tool message: tool_call_id {tc_id!r} was not issued by the "
                    f"preceding assistant tool_calls at messages[{block_at}] (issued: {block_ids})"
                )
            elif tc_id in answered:
                problems.append(f"messages[{i}]: duplicate tool message for tool_call_id {tc_id!r}")
            else:
                answered.add(tc_id)
            continue

        close_block(f"messages[{i}] ({role})")
        content = msg.get("content")
        if role == "assistant":
            has_calls = msg.get("tool_calls") is not None
            if has_calls:
                tc_problems, ids = _check_tool_calls(i, msg["tool_calls"], seen_ids)
                problems.extend(tc_problems)
                block_at, block_ids, answered = i, ids, set()
                if content is not None and not _content_ok(content):
                    problems.append(f"messages[{i}]: assistant content must be a string, a list of parts or null")
            elif content is None or not _content_ok(content):
                problems.append(
                    f"messages[{i}]: assistant message needs string content unless it has tool_calls"
                )
        elif not _content_ok(content):
            problems.append(f"messages[{i}]: {role} message content must be a string or a list of parts")

    close_block("the end of the transcript")
    return problems


def validate_tools(tools: Any, tool_choice: Any = None, parallel_tool_calls: Any = None) -> list[str]:
    """Check the request's ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` (OpenAI rules).

    Args:
        tools: the request's ``tools`` value, or ``None`` when absent.
        tool_choice: the request's ``tool_choice`` value, or ``None`` when absent.
        parallel_tool_calls: the request's ``parallel_tool_calls`` value, or ``None`` when absent.

    Returns:
        Violation strings (empty when fine). Rules: ``tools`` is a non-empty list of
        ``{"type": "function", "function": {"name": ..., "parameters"?: object}}`` with names matching
        ``^[A-Za-z0-9_-]{1,64}$`` and unique; ``tool_choice`` / ``parallel_tool_calls`` only with
        tools; a named ``tool_choice`` must name one of the tools.
    """
    problems: list[str] = []
    names: list[str] = []
    if tools is None:
        if tool_choice is not None:
            problems.append("'tool_choice' is only allowed when 'tools' are specified")
        if parallel_tool_calls is not None:
            problems.append("'parallel_tool_calls' is only allowed when 'tools' are specified")
        return problems
    if not isinstance(tools, list) or not tools:
        return ["'tools' must be a non-empty list when present"]
    for k, tool in enumerate(tools):
        where = f"tools[{k}]"
        if not isinstance(tool, dict):
            problems.append(f"{where}: must be an object")
            continue
        if tool.get("type") != "function":
            problems.append(f"{where}: 'type' must be 'function', got {tool.get('type')!r}")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            problems.append(f"{where}: 'function' must be an object")
            continue
        name = fn.get("name")
        if not isinstance(name, str) or not _FUNCTION_NAME_RE.match(name):
            problems.append(f"{where}.function: name {name!r} must match ^[A-Za-z0-9_-]{{1,64}}$")
        elif name in names:
            problems.append(f"{where}.function: duplicate function name {name!r}")
        else:
            names.append(name)
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            problems.append(f"{where}.function: 'parameters' must be a JSON Schema object")
        if "description" in fn and not isinstance(fn["description"], str):
            problems.append(f"{where}.function: 'description' must be a string")
    if isinstance(tool_choice, dict):
        chosen = (tool_choice.get("function") or {}).get("name")
        if chosen not in names:
            problems.append(f"'tool_choice' names function {chosen!r}, which is not among tools {names}")
    elif tool_choice is not None and tool_choice not in ("none", "auto", "required"):
        problems.append(f"'tool_choice' must be 'none', 'auto', 'required' or an object, got {tool_choice!r}")
    return problems


def validate_request(body: Any) -> list[str]:
    """Check a whole chat-completions request body.

    Returns the violations of: body is an object; ``model`` is a non-empty string;
    :func:`validate_transcript` on ``messages``; :func:`validate_tools` on ``tools`` /
    ``tool_choice`` / ``parallel_tool_calls``; ``stream_options`` only with ``stream: true``.
    """
    if not isinstance(body, dict):
        return ["request body must be a JSON object"]
    problems: list[str] = []
    if not isinstance(body.get("model"), str) or not body.get("model"):
        problems.append("'model' must be a non-empty string")
    problems.extend(validate_transcript(body.get("messages")))
    problems.extend(validate_tools(body.get("tools"), body.get("tool_choice"), body.get("parallel_tool_calls")))
    if body.get("stream_options") is not None and body.get("stream") is not True:
        problems.append("'stream_options' is only allowed when 'stream' is true")
    return problems


# --------------------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------------------


def _words(value: Any) -> int:
    """Crude token estimate: whitespace-separated words in every string inside ``value``."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, dict):
        return sum(_words(v) for v in value.values())
    if isinstance(value, list):
        return sum(_words(v) for v in value)
    return 0


def _prompt_words(messages: Any) -> int:
    """Crude prompt-token estimate: words in every message's text content (string, or the ``text``
    of content parts) and in its tool-call argument strings."""
    total = 0
    for msg in messages if isinstance(messages, list) else []:
        if not isinstance(msg, dict):
            continue
        content = msg.get("content")
        if isinstance(content, str):
            total += _words(content)
        elif isinstance(content, list):
            total += sum(_words(p.get("text")) for p in content if isinstance(p, dict))
        for tc in msg.get("tool_calls") or []:
            if isinstance(tc, dict) and isinstance(tc.get("function"), dict):
                total += _words(tc["function"].get("arguments"))
    return total


def _pieces(text: str, size: int) -> list[str]:
    """Split ``text`` into consecutive pieces of at most ``size`` characters (at least one piece)."""
    return [text[k : k + size] for k in range(0, len(text), size)] or [""]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer
    timeout = 10  # seconds an idle keep-alive connection may stay open

    def log_message(self, format: str, *args: Any) -> None:  # stdlib signature
        pass  # keep pytest output clean

    def _send_json(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _retry_count(self) -> int | None:
        raw = self.headers.get("x-stainless-retry-count")
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None

    def do_GET(self) -> None:  # stdlib name
        owner = self.server.owner
        if self.path.rstrip("/") == "/v1/models":
            owner._log_other("GET", self.path, 200, self._retry_count())
            self._send_json(200, owner._models_body())
        else:
            self._not_found("GET")

    def do_POST(self) -> None:  # stdlib name
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._not_found("POST")
            return
        self.server.owner._handle_chat(self, raw)

    def _not_found(self, method: str) -> None:
        owner = self.server.owner
        msg = f"the test stub has no route {method} {self.path}"
        owner._record_script_error(None, msg)
        owner._log_other(method, self.path, 404, self._retry_count())
        self._send_json(
            404, {"error": {"message": msg, "type": "invalid_request_error", "param": None, "code": "not_found"}}
        )


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedOpenAIServer


class ScriptedOpenAIServer:
    """An OpenAI-compatible chat-completions server on 127.0.0.1:<free port>, run in a daemon thread.

    Args:
        script: a sequence of steps consumed in order, one per valid chat-completions request
            (``Reply``, ``ToolCalls``, ``HTTPError``), or a :data:`Responder` callable
            ``responder(request_json, step_index) -> Step`` for routing by content.
        models: model ids listed by ``GET /v1/models``.
        default_prompt_tokens / default_completion_tokens: the usage reported when a step has no
            ``usage`` of its own. ``None`` (default) means a crude word count, not a tokenizer:
            prompt = whitespace-separated words of the messages' text contents and tool-call arguments;
            completion = words of the reply content, plus per tool call 1 (name) + the words of its
            argument text; each at least 1.

    Use as a context manager (``with ScriptedOpenAIServer(...) as srv``) or ``start()`` / ``close()``.

    Attributes (read after or during the run; lists are appended under a lock):
        base_url: ``"http://127.0.0.1:PORT/v1"`` for ``ChatOpenAI(base_url=...)``.
        requests: every chat-completions request body received (parsed JSON; the raw text when the
            body was not JSON), in arrival order.
        violations: ``(request_index, message)`` per violated rule; such requests got HTTP 400.
        script_errors: ``(request_index | None, message)`` for anything the script could not answer:
            exhausted script, responder returned ``None`` or raised, unknown route (index ``None``).
            Each was answered with HTTP 500 (404 for unknown routes).
        exchanges: one :class:`Exchange` per answered request, in order.

    Errors: a 400 violation answer is never retried by the openai client; 429/5xx answers are.
    """

    def __init__(
        self,
        script: Sequence[Step] | Responder,
        *,
        models: Sequence[str] = ("stub",),
        default_prompt_tokens: int | None = None,
        default_completion_tokens: int | None = None,
    ) -> None:
        if callable(script):
            self._steps: list[Step] | None = None
            self._responder: Responder | None = script
        else:
            steps = list(script)
            for k, s in enumerate(steps):
                if not isinstance(s, (Reply, ToolCalls, HTTPError)):
                    raise TypeError(f"script[{k}] is {type(s).__name__}, expected Reply, ToolCalls or HTTPError")
            self._steps = steps
            self._responder = None
        self._models = tuple(models)
        self._default_prompt = default_prompt_tokens
        self._default_completion = default_completion_tokens
        self._lock = threading.Lock()
        self._step_index = 0
        self._id_counter = 0
        self._served_prompt = 0
        self._served_completion = 0
        self.requests: list[Any] = []
        self.violations: list[tuple[int, str]] = []
        self.script_errors: list[tuple[int | None, str]] = []
        self.exchanges: list[Exchange] = []
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> ScriptedOpenAIServer:
        """Bind 127.0.0.1:0 and serve in a daemon thread. Returns ``self``."""
        if self._httpd is not None:
            raise RuntimeError("server already started")
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server not started")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # ---- inspection helpers ------------------------------------------------------------------------

    @property
    def remaining_steps(self) -> int | None:
        """Steps not yet consumed (``None`` with a responder callable)."""
        with self._lock:
            return None if self._steps is None else len(self._steps) - self._step_index

    @property
    def served_usage(self) -> Usage:
        """Sum of the usage reported in every success answer so far."""
        with self._lock:
            return Usage(self._served_prompt, self._served_completion)

    def assert_clean(self) -> None:
        """Raise ``AssertionError`` listing violations and script errors, if there are any."""
        with self._lock:
            problems = [f"request {i}: {m}" for i, m in self.violations]
            problems += [f"script error (request {i}): {m}" for i, m in self.script_errors]
        if problems:
            raise AssertionError("OpenAI stub saw problems:\n" + "\n".join(problems))

    def chat_openai(self, **overrides: Any) -> Any:
        """A ``langchain_openai.ChatOpenAI`` pointed at this server (``model="stub"``,
        ``api_key="test"``, ``max_retries=0``, ``timeout=10`` s unless overridden)."""
        from langchain_openai import ChatOpenAI  # local import: keep this module stdlib-only

        kwargs: dict[str, Any] = {
            "base_url": self.base_url,
            "api_key": "test",
            "model": self._models[0] if self._models else "stub",
            "max_retries": 0,
            "timeout": 10,
        }
        kwargs.update(overrides)
        return ChatOpenAI(**kwargs)

    # ---- request handling (called from handler threads) ----------------------------------------------

    def _models_body(self) -> dict:
        return {
            "object": "list",
            "data": [{"id": m, "object": "model", "created": 0, "owned_by": "switchboard-tests"} for m in self._models],
        }

    def _record_script_error(self, index: int | None, message: str) -> None:
        with self._lock:
            self.script_errors.append((index, message))

    def _log_other(self, method: str, path: str, status: int, retry_count: int | None) -> None:
        with self._lock:
            self.exchanges.append(Exchange(method, path, None, status, None, False, retry_count))

    def _next_id(self) -> str:
        with self._lock:
            self._id_counter += 1
            return f"call_stub_{self._id_counter}"

    def _handle_chat(self, h: _Handler, raw: bytes) -> None:
        retry_count = h._retry_count()
        try:
            body: Any = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            body = raw.decode("utf-8", "replace")
            problems = [f"request body is not valid JSON: {e}"]
        else:
            problems = validate_request(body)
        stream = isinstance(body, dict) and body.get("stream") is True

        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            if problems:
                self.violations.extend((index, p) for p in problems)
                self.exchanges.append(Exchange("POST", h.path, index, 400, None, stream, retry_count))
                step: Step | None = None
                step_index = -1
            else:
                step_index = self._step_index
                self._step_index += 1
                step = None
                if self._steps is not None and step_index < len(self._steps):
                    step = self._steps[step_index]

        if problems:
            h._send_json(
                400,
                {
                    "error": {
                        "message": "Invalid request (test stub strict checks): " + "; ".join(problems),
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "invalid_request",
                    }
                },
            )
            return

        error: str | None = None
        if self._responder is not None:
            try:
                step = self._responder(body, step_index)
            except Exception as e:  # noqa: BLE001 - report any responder failure to the test
                error = f"responder raised {type(e).__name__}: {e}"
            else:
                if step is None:
                    error = f"responder returned None for step {step_index}"
                elif not isinstance(step, (Reply, ToolCalls, HTTPError)):
                    error = f"responder returned {type(step).__name__}, expected Reply, ToolCalls or HTTPError"
                    step = None
        elif step is None:
            error = (
                f"script exhausted: request {index} arrived but the script has only "
                f"{len(self._steps or [])} step(s)"
            )

        if error is not None or step is None:
            msg = error or "no step"
            with self._lock:
                self.script_errors.append((index, msg))
                self.exchanges.append(Exchange("POST", h.path, index, 500, None, stream, retry_count))
            h._send_json(
                500,
                {"error": {"message": f"test stub script error: {msg}", "type": "server_error", "param": None,
                           "code": "script_error"}},
                headers={"x-should-retry": "false"},
            )
            return

        with self._lock:
            self.exchanges.append(
                Exchange("POST", h.path, index, step.status if isinstance(step, HTTPError) else 200, step, stream, retry_count)
            )

        if isinstance(step, HTTPError):
            headers: dict[str, str] = {}
            if step.retry_after is not None:
                headers["retry-after-ms"] = str(int(round(step.retry_after * 1000)))
                headers["retry-after"] = repr(float(step.retry_after))
            h._send_json(step.status, step.body_json(), headers=headers)
            return

        message, finish_reason, completion_words = self._assistant_message(step)
        usage = step.usage or Usage(
            self._default_prompt if self._default_prompt is not None else max(1, _prompt_words(body.get("messages"))),
            self._default_completion if self._default_completion is not None else max(1, completion_words),
        )
        with self._lock:
            self._served_prompt += usage.prompt_tokens
            self._served_completion += usage.completion_tokens
        completion_id = f"chatcmpl-stub-{index}"
        model = body.get("model")
        created = int(time.time())
        if not stream:
            h._send_json(
                200,
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
                    "usage": usage.to_json(),
                },
            )
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self._send_stream(h, completion_id, created, model, message, finish_reason, usage if include_usage else None)

    def _assistant_message(self, step: Reply | ToolCalls) -> tuple[dict, str, int]:
        """Return (assistant message dict, finish_reason, completion word count)."""
        if isinstance(step, Reply):
            return {"role": "assistant", "content": step.content, "refusal": None}, "stop", _words(step.content)
        calls = []
        words = _words(step.content or "")
        for tc in step.calls:
            args = tc.arguments_json()
            calls.append(
                {"id": tc.id or self._next_id(), "type": "function", "function": {"name": tc.name, "arguments": args}}
            )
            words += 1 + len(args.split())
        return {"role": "assistant", "content": step.content, "refusal": None, "tool_calls": calls}, "tool_calls", words

    def _send_stream(
        self,
        h: _Handler,
        completion_id: str,
        created: int,
        model: Any,
        message: dict,
        finish_reason: str,
        usage: Usage | None,
    ) -> None:
        """Write the answer as OpenAI SSE chunks (``chat.completion.chunk``) then ``data: [DONE]``.

        Chunks: role delta; content pieces; per tool call a header delta (id, name, empty arguments)
        then argument pieces, each with its ``index``; a final empty delta with ``finish_reason``; and,
        when ``usage`` is given (``stream_options.include_usage``), a chunk with ``choices: []`` and
        the usage. As OpenAI does, every chunk carries ``"usage": null`` when usage is requested.
        """
        def chunk(delta: dict | None, finish: str | None = None, *, usage_chunk: bool = False) -> dict:
            c: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [] if usage_chunk else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }
            if usage is not None:
                c["usage"] = usage.to_json() if usage_chunk else None
            return c

        first_content = None if message.get("content") is None else ""
        events: list[dict] = [chunk({"role": "assistant", "content": first_content})]
        if message.get("content"):
            events += [chunk({"content": p}) for p in _pieces(message["content"], 8)]
        for k, tc in enumerate(message.get("tool_calls") or []):
            events.append(
                chunk({"tool_calls": [{"index": k, "id": tc["id"], "type": "function",
                                       "function": {"name": tc["function"]["name"], "arguments": ""}}]})
            )
            if tc["function"]["arguments"]:
                events += [
                    chunk({"tool_calls": [{"index": k, "function": {"arguments": p}}]})
                    for p in _pieces(tc["function"]["arguments"], 10)
                ]
        events.append(chunk({}, finish_reason))
        if usage is not None:
            events.append(chunk(None, usage_chunk=True))

        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream; charset=utf-8")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True
        for ev in events:
            h.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
        h.wfile.write(b"data: [DONE]\n\n")
        h.wfile.flush()


# ------------------------------------------------------------------ helpers of the tests that drive the stub


def agent_of(request: dict) -> str:
    """The agent named on the first line of a chat-completions request's system prompt ("?" when none)."""
    from nodes.prompts import agent_from_prompt

    msgs = request.get("messages") or [{}]
    return agent_from_prompt(msgs[0].get("content") if msgs[0].get("role") == "system" else "") or "?"


class ByAgent:
    """Responder: each agent replays its own steps in order; ``seen`` lists the agent of every request.
    An agent with no step left gets no answer (the stub records a script error and the test fails)."""

    def __init__(self, **scripts: list):
        self.scripts = {a: list(s) for a, s in scripts.items()}
        self.seen: list[str] = []

    def __call__(self, request: dict, index: int):
        agent = agent_of(request)
        self.seen.append(agent)
        steps = self.scripts.get(agent) or []
        return steps.pop(0) if steps else None

    @property
    def leftover(self) -> dict:
        return {a: s for a, s in self.scripts.items() if s}


def check_server(srv: ScriptedOpenAIServer) -> None:
    """Every request the server received passes the strict transcript checks (and got no 400), the script had
    no errors, and each request carries exactly one system message, first (strict chat templates of local servers)."""
    srv.assert_clean()
    assert srv.requests, "the model server received no request"
    for i, body in enumerate(srv.requests):
        assert validate_request(body) == [], f"request {i}"
        roles = [m["role"] for m in body["messages"]]
        assert roles[0] == "system" and "system" not in roles[1:], f"request {i}: roles {roles}"
        assert not body.get("stream"), f"request {i} streamed"


def route(target: str, confidence: float = 0.9, reason: str = "it is theirs", **extracted: Any) -> ToolCall:
    """The triage model's ``route_to_agent`` call naming ``target``."""
    return ToolCall("route_to_agent", {"target": target, "confidence": confidence, "reason": reason,
                                       "extracted": extracted})
