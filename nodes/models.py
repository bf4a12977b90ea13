"""Model selection: one code path for every model (DESIGN.md, Models), and one-line descriptions of model failures."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any
from urllib.parse import urlsplit

from langchain_core.language_models import BaseChatModel

from graph.contracts.brief import BriefReader, ModelBrief
from graph.contracts.errors import ConfigError
from graph.contracts.reading import MessageReader
from graph.contracts.results import ModelFailure

__all__ = ["make_model", "make_reader", "with_brief", "is_openai_model", "describe_model_error", "model_name",
           "FATAL_MODEL_ERRORS"]


def make_model(spec: str = "offline", *, timeout_s: float = 30.0, max_retries: int = 2, router=None) -> BaseChatModel:
    """Build the chat model named by ``spec``.

    Args:
        spec: ``"offline"`` (embedded, no key, no network) or ``"openai:<model>"`` (langchain-openai; honours
            ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` for any OpenAI-compatible server).
        timeout_s: request timeout in seconds (OpenAI path), per attempt.
        max_retries: client retries on 408/409/429/5xx, timeouts and connection errors, with the ``openai``
            client's exponential backoff (0.5 s * 2**n with jitter, capped at 8 s, or the server's
            ``Retry-After`` when 0 < it <= 120 s; see ``openai/_base_client.py``). 0 = one attempt only.
        router: optional IntentRouter for the offline model.

    Raises:
        ConfigError: unknown spec, empty model name, ``OPENAI_API_KEY`` missing, ``OPENAI_BASE_URL`` not an
            http(s) URL, a non-positive timeout or negative retries.
    """
    spec = (spec or "offline").strip()
    if spec == "offline":
        from nodes.embedded.offline_model import OfflineChatModel

        return OfflineChatModel(router=router)
    if spec.startswith("openai:"):
        name = spec.split(":", 1)[1].strip()
        if not name:
            raise ConfigError("--model openai:<name> needs a model name, e.g. openai:gpt-4o-mini")
        if not os.environ.get("OPENAI_API_KEY"):
            raise ConfigError("OPENAI_API_KEY is not set; export it (any value for a local server that ignores keys)")
        if not timeout_s or timeout_s <= 0:
            raise ConfigError(f"the model timeout must be > 0 seconds, got {timeout_s}")
        if max_retries < 0:
            raise ConfigError(f"model retries must be >= 0, got {max_retries}")
        from langchain_openai import ChatOpenAI

        # disable_streaming="tool_calling": calls with tools never stream, even under graph.stream(stream_mode=
        # "messages"). Streamed tool-call arguments are parsed as *partial* JSON, so a truncated call would be
        # silently "repaired" into a valid-looking one; unstreamed, it arrives as an invalid_tool_call and is refused.
        kwargs: dict[str, Any] = {"model": name, "timeout": timeout_s, "max_retries": max_retries, "temperature": 0,
                  "disable_streaming": "tool_calling"}
        base_url = os.environ.get("OPENAI_BASE_URL", "").strip()
        if base_url:
            parts = urlsplit(base_url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigError(f"OPENAI_BASE_URL must be an http(s) URL such as http://127.0.0.1:8000/v1, got {base_url!r}")
            kwargs["base_url"] = base_url
        return ChatOpenAI(**kwargs)
    raise ConfigError(f"unknown model {spec!r}; use 'offline' or 'openai:<model>'")


def make_reader(model: Any, router: Any) -> MessageReader:
    """The message reader (``graph.contracts.reading.MessageReader``) that goes with ``model``: the model's own
    (``model.message_reader``, when it brings one), else the embedded desk's
    (``nodes.embedded.reader.EmbeddedReader`` over ``router``, the desk's intent router) — for the embedded model and
    for any other (an OpenAI model, a scripted test model), which read no message outside their own turn.

    Raises:
        ConfigError: ``model.message_reader`` is set but is not a ``MessageReader``.
    """
    own = getattr(model, "message_reader", None)
    if own is not None:
        if not isinstance(own, MessageReader):
            raise ConfigError(f"{type(model).__name__}.message_reader is not a MessageReader (graph.contracts.reading)")
        return own
    from nodes.embedded.reader import EmbeddedReader

    return EmbeddedReader(router)


def with_brief(bound: Any, model: Any, brief: ModelBrief) -> Any:
    """``bound`` (``model``, possibly with tools bound) passing ``brief`` on every call when ``model`` reads briefs
    (``graph.contracts.brief.BriefReader``: the embedded model decides from it); ``bound`` unchanged for any other model, whose
    system prompt carries the same information as text (a client such as ``ChatOpenAI`` would send an unknown keyword
    to the server)."""
    inner = getattr(model, "bound", model)
    if isinstance(inner, BriefReader) and inner.reads_brief():
        return bound.bind(brief=brief)
    return bound


def is_openai_model(model: object) -> bool:
    """True when ``model`` is a langchain-openai chat model (``ChatOpenAI`` / ``AzureChatOpenAI``), possibly
    wrapped by ``.bind(...)``; such models route triage with a structured :class:`nodes.handoff_tools.RouteDecision`."""
    inner = getattr(model, "bound", model)
    if "langchain_openai.chat_models.base" not in sys.modules:
        return False  # no instance can exist before its class is imported; importing it costs ~1 s at start-up
    try:
        from langchain_openai.chat_models.base import BaseChatOpenAI
    except ImportError:  # pragma: no cover - langchain-openai is a dependency
        return False
    return isinstance(inner, BaseChatOpenAI)


#: Kinds after which every further call fails the same way (the CLI stops an interactive session on them).
FATAL_MODEL_ERRORS: frozenset[str] = frozenset({"connection", "auth", "not_found"})


def model_name(ai: Any, model: Any) -> str:
    """The model's name for the event log: the response's ``model_name`` metadata, else the client's ``model_name``
    / ``model`` attribute, else the model class name."""
    meta = getattr(ai, "response_metadata", None) or {}
    return str(meta.get("model_name") or getattr(model, "model_name", None) or getattr(model, "model", None)
               or type(model).__name__)


def _failure(kind: str, message: str, status: int | None, error_type: str) -> ModelFailure:
    return ModelFailure(kind=kind, message=message, status=status, error_type=error_type)  # type: ignore[arg-type]


def _server_of(exc: BaseException) -> str:
    req = getattr(exc, "request", None)
    url = getattr(req, "url", None)
    if url is None:
        resp = getattr(exc, "response", None)
        url = getattr(getattr(resp, "request", None), "url", None)
    if url is None:
        return os.environ.get("OPENAI_BASE_URL") or "the model server"
    try:
        return f"{url.scheme}://{url.netloc.decode() if isinstance(url.netloc, bytes) else url.netloc}"
    except AttributeError:
        return str(url)


def _root_cause(exc: BaseException) -> str:
    seen: BaseException = exc
    while seen.__cause__ is not None or seen.__context__ is not None:
        seen = seen.__cause__ or seen.__context__ or seen
    text = str(seen).strip() or type(seen).__name__
    low = text.lower()
    if "refused" in low:
        return "connection refused"
    if "name or service not known" in low or "nodename nor servname" in low or "getaddrinfo" in low:
        return "unknown host"
    return text.splitlines()[0][:120]


def _one_line(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _classes(module: str, *names: str) -> tuple[type, ...]:
    """The named exception classes of ``module`` that exist in the installed version (none if it is missing)."""
    try:
        mod = importlib.import_module(module)
    except ImportError:  # pragma: no cover - both modules are dependencies
        return ()
    return tuple(c for c in (getattr(mod, n, None) for n in names) if isinstance(c, type))


def describe_model_error(exc: BaseException, *, timeout_s: float | None = None) -> ModelFailure:
    """Classify a failed model call and phrase it on one line (who must do what).

    Args:
        exc: the exception raised by ``model.invoke`` after the client's own retries.
        timeout_s: the configured timeout, quoted in the timeout message when given.

    Returns:
        A :class:`graph.contracts.results.ModelFailure` (turn and agent unset). Never raises. Classification: timeouts first
        (``openai.APITimeoutError`` subclasses ``APIConnectionError``), then connection failures, then the HTTP
        status of ``openai.APIStatusError`` (401/403 auth, 404, 429, >=500, other 4xx); exceptions of other
        providers by LangChain's provider-agnostic ``langchain_core.exceptions.Model*Error`` classes (when the
        installed version has them) or builtin ``TimeoutError`` / ``ConnectionError``.
    """
    name = type(exc).__name__
    lc = "langchain_core.exceptions"
    server = _server_of(exc)
    if isinstance(exc, _classes("openai", "APITimeoutError") + _classes(lc, "ModelTimeoutError") + (TimeoutError,)):
        within = f" within {timeout_s:g} s" if timeout_s else ""
        return _failure("timeout", _one_line(f"the model server at {server} did not answer{within} (timeout);"
                                               " raise --timeout or check the server"), None, name)
    if isinstance(exc, _classes("openai", "APIConnectionError") + _classes(lc, "ModelConnectionError") + (ConnectionError,)):
        return _failure("connection", _one_line(f"cannot reach the model server at {server} ({_root_cause(exc)});"
                                                  " check OPENAI_BASE_URL and that the server is running"), None, name)
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    detail = _one_line(getattr(exc, "message", None) or str(exc), 120)
    if status in (401, 403) or isinstance(exc, _classes(lc, "ModelAuthenticationError", "ModelPermissionDeniedError")):
        return _failure("auth", _one_line(f"the model server at {server} refused the API key (HTTP {status or '401'});"
                                            " check OPENAI_API_KEY"), status, name)
    if status == 404 or isinstance(exc, _classes(lc, "ModelNotFoundError")):
        return _failure("not_found", _one_line(f"the model server at {server} answered HTTP 404 ({detail}); check the"
                                                 " model name and OPENAI_BASE_URL (it usually ends in /v1)"), status, name)
    if status == 429 or isinstance(exc, _classes(lc, "ModelRateLimitError")):
        return _failure("rate_limit", _one_line(f"the model server at {server} is rate-limiting (HTTP 429) and the"
                                                  " retries were used up; try again later or raise --retries"), status, name)
    if (status is not None and status >= 500) or isinstance(exc, _classes(lc, "ModelAPIError")):
        return _failure("server", _one_line(f"the model server at {server} failed (HTTP {status or '5xx'}: {detail})"
                                              " and the retries were used up"), status, name)
    if status is not None or isinstance(exc, _classes(lc, "ModelInvalidRequestError")):
        return _failure("bad_request", _one_line(f"the model server at {server} rejected the request"
                                                   f" (HTTP {status or '400'}: {detail})"), status, name)
    return _failure("other", _one_line(f"the model call failed ({name}: {exc})"), None, name)
