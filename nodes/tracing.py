"""OpenTelemetry spans from the event log's live emission (``nodes.instrumentation``), off by default.

Turned on by ``Settings.otel`` (``SWITCHBOARD_OTEL=console|otlp``; ``off`` by default) or by handing
``build_graph(..., tracer_provider=…)`` a TracerProvider of your own. When off, this module is not even imported:
the event recorder's ``tap`` stays None and the cost is one attribute test per event.

:class:`SpanTap` receives every event as it is emitted (``EventRecorder.tap``: ``(kind, record, state)``, ``state`` the
node visit's input state, None for run-level events) and turns them into spans, parents set explicitly from the
event's ``run_id`` and task namespace (so parallel branches and async runs nest right whatever thread runs them):

* ``switchboard run`` — one ``invoke``/``stream`` call (run_started .. run_completed/run_failed); a resume is a run;
* ``invoke_agent <node>`` — one node visit (agent_started .. agent_finished), child of the run;
* ``chat <model>`` — one model call (model_called: its ``latency_ms`` gives the start), child of the visit;
* ``execute_tool <tool>`` — one business tool call (tool_called .. tool_finished), child of the visit;
* ``handoff <from> → <to>`` — one requested handoff (handoff_requested .. handoff_accepted/handoff_refused), child of
  the sender's visit, with the attributes of the handoff log record: from, to, reason, fingerprint, state_version,
  history items forwarded, hop, handoff id, outcome (and, when refused, the refusal's kind and reason);
* ``approval`` — one visit of ``human_approval``, child of that visit: ``paused`` (with the approvers required and
  so far) or the decision a resume brought (``approve``/``reject``/…, in our shape or LangChain's HITL shape).

Every span carries the thread id (``switchboard.thread_id`` and GenAI's ``gen_ai.conversation.id``) and the tenant
(``switchboard.tenant_id``: the thread owner's). No personal data: no message text, no names, no amounts — ids of
threads, tasks, refunds and handoffs, agent, model and tool names, counts and statuses only. The free text, a
handoff's reason (written by the model; a refusal's is ours), is cut to :data:`MAX_REASON_CHARS`, has card numbers,
e-mail addresses, phone numbers (``policies.redaction``), amounts (a symbol or ISO code before or after, decimal point
or comma), other long digit runs and IBAN-like account ids masked, and every word the customer capitalized inside a
sentence (a name) replaced by ``<name>``; it is withheld when it quotes three consecutive words of the customer's
messages. Errors name the exception class, never its message. Attribute names
follow the OpenTelemetry GenAI semantic conventions where one exists (``gen_ai.*``), ``switchboard.*`` otherwise.

A tap never fails a run: an error inside it is logged (debug) and the event goes on to the log as usual.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from graph.contracts.approval import decision_type
from graph.contracts.errors import ConfigError
from policies.authz import owner_of
from policies.loops import normalize_task
from policies.redaction import redact

__all__ = ["SpanTap", "tracer_provider_for", "safe_reason", "MAX_REASON_CHARS", "TRACER_NAME"]

_log = logging.getLogger(__name__)

#: The instrumentation scope of every span.
TRACER_NAME = "switchboard"
#: Longest handoff reason a span carries (characters).
MAX_REASON_CHARS = 200
#: Consecutive words of a customer's message that make a reason a quote (then withheld).
_QUOTE_WORDS = 3

_CURRENCY = r"(?:GBP|EUR|USD|[£$€])"
_AMOUNT = re.compile(
    rf"{_CURRENCY}\s?\d[\d,.]*\d|{_CURRENCY}\s?\d"  # £23.80, GBP 23, USD100
    r"|\b\d[\d,.]*\s?(?:GBP|EUR|USD|[£$€]|pounds?|euros?|dollars?|pence|quid|p)(?![\w])"  # 23 pounds, 23,80 €, 2380p
    r"|\b[1-9][\d,]*\.\d{2}\b|\b\d+,\d{2}\b", re.IGNORECASE)  # a bare 0.xx is a score (the router's), not money
#: Long digit runs (a card number that fails the Luhn check, an account number) and IBAN-like account ids; ids of the
#: desk (``tx_1001``, ``rf_…``) are joined to their prefix by "_" and so never match.
_LONG_NUMBER = re.compile(r"(?<![\w.])(?:\d[ -]?){7,}\d(?![\w])|\b[A-Z]{2}\d{2}[A-Z0-9]{10,30}\b")
#: A word the customer wrote capitalized inside a sentence is taken for a name (a person's, a street's, a shop's).
_NAME_WORD = re.compile(r"[A-Z][a-z][\w'-]*")


def safe_reason(reason: Any, state: Mapping[str, Any] | None) -> str:
    """``reason`` as a span may carry it (module doc): "" for none; ``"<withheld: quotes the customer>"`` when it holds
    :data:`_QUOTE_WORDS` consecutive words of a customer message in ``state["messages"]``; else masked and cut."""
    text = str(reason or "").strip()
    if not text:
        return ""
    said = _customer_words(state)
    words = normalize_task(text).split()
    grams = {" ".join(words[i:i + _QUOTE_WORDS]) for i in range(len(words) - _QUOTE_WORDS + 1)}
    if grams & said:
        return "<withheld: quotes the customer>"
    masked = _LONG_NUMBER.sub("<number>", _AMOUNT.sub("<amount>", redact(text)))
    names = _customer_names(state)
    if names:
        masked = re.sub(r"\b[\w'-]+\b", lambda m: "<name>" if m.group(0).lower() in names else m.group(0), masked)
    return masked[:MAX_REASON_CHARS]


def _customer_names(state: Mapping[str, Any] | None) -> set[str]:
    """The words (lower-cased) the customer's messages in ``state`` capitalize inside a sentence (:data:`_NAME_WORD`):
    names, which a reason must not carry even one at a time."""
    out: set[str] = set()
    for content in _customer_texts(state):
        for sentence in re.split(r"(?<=[.!?;:,])\s+|\n+", content):
            words = sentence.strip().split()
            out.update(w.strip(".,!?;:'\"()").lower() for w in words[1:] if _NAME_WORD.fullmatch(w.strip(".,!?;:'\"()")))
    return out


def _customer_texts(state: Mapping[str, Any] | None) -> list[str]:
    """The text of each customer (human) message in ``state["messages"]``."""
    out: list[str] = []
    for m in (state or {}).get("messages") or ():
        kind = getattr(m, "type", None) or (m.get("type") or m.get("role") if isinstance(m, Mapping) else None)
        if kind in ("human", "user"):
            content = getattr(m, "content", None) if not isinstance(m, Mapping) else m.get("content")
            out.append(str(content or ""))
    return out


def _customer_words(state: Mapping[str, Any] | None) -> set[str]:
    """Every run of :data:`_QUOTE_WORDS` normalized words of the customer's (human) messages in ``state``."""
    out: set[str] = set()
    for content in _customer_texts(state):
        words = normalize_task(content).split()
        out.update(" ".join(words[i:i + _QUOTE_WORDS]) for i in range(len(words) - _QUOTE_WORDS + 1))
    return out


# ---------------------------------------------------------------- the exporters of SWITCHBOARD_OTEL

@functools.cache
def tracer_provider_for(mode: str) -> Any:
    """The process's TracerProvider for ``Settings.otel`` ``mode`` (one per mode and process, so every graph built
    shares its exporter): ``console`` writes each span as JSON to stderr when it ends (stdout stays the answers');
    ``otlp`` batches them to the OTLP exporter configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables
    (``…_PROTOCOL`` ``grpc`` or, by default, ``http/protobuf``; ``…_ENDPOINT``, ``…_HEADERS``). The resource is
    ``service.name=switchboard`` unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` names one.

    Raises:
        ConfigError: an unknown mode, or ``otlp`` without the exporter package installed.
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": TRACER_NAME}))
    if mode == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    elif mode == "otlp":
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter()))
    else:
        raise ConfigError(f"invalid setting otel (SWITCHBOARD_OTEL): {mode!r}; use off, console or otlp")
    return provider


def _otlp_exporter() -> Any:
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    package = "opentelemetry-exporter-otlp-proto-grpc" if protocol == "grpc" else "opentelemetry-exporter-otlp-proto-http"
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]
    except ImportError:
        raise ConfigError(f"SWITCHBOARD_OTEL=otlp needs the package {package} (pip install 'switchboard[otel]')") from None
    return OTLPSpanExporter()


# ---------------------------------------------------------------- events -> spans

@dataclass
class _Visit:
    span: Span
    state: Mapping[str, Any] | None
    approval: Span | None = None
    open: dict[tuple[str, str], list[Span]] = field(default_factory=dict)  # (kind, key) -> started, not ended


@dataclass
class _Run:
    span: Span
    tenant: bool = False


def _now() -> int:
    return time.time_ns()


def _principal_kind(ref: Any) -> str:
    return str(ref or "unknown").split(":", 1)[0]


def _error_class(reason: Any) -> str:
    return str(reason or "error").split(":", 1)[0][:80]


class SpanTap:
    """The ``EventRecorder.tap`` that records spans with ``provider`` (a TracerProvider). Thread-safe."""

    def __init__(self, provider: Any):
        self.tracer = provider.get_tracer(TRACER_NAME)
        self._lock = threading.RLock()
        self._runs: dict[str | None, _Run] = {}
        self._visits: dict[tuple[str | None, str], _Visit] = {}
        self._handlers: dict[str, Callable[[dict, Mapping[str, Any] | None], None]] = {
            "run_started": self._run_started, "run_completed": self._run_ended, "run_failed": self._run_ended,
            "agent_started": self._visit_started, "agent_finished": self._visit_finished,
            "model_called": self._model_called, "tool_called": self._tool_called, "tool_finished": self._tool_finished,
            "handoff_requested": self._handoff_requested, "handoff_accepted": self._handoff_ended,
            "handoff_refused": self._handoff_ended, "interrupt": self._interrupt, "resumed": self._resumed,
            "access_denied": self._denied,
        }

    def __call__(self, kind: str, record: dict, state: Mapping[str, Any] | None = None) -> None:
        handler = self._handlers.get(kind, self._span_event)
        try:
            with self._lock:
                handler({**record, "kind": kind}, state)
        except Exception as exc:  # noqa: BLE001 - tracing never fails a run (module doc)
            _log.debug("span of %s not recorded: %r", kind, exc)

    # ------------------------------------------------------------ common attributes
    def _base(self, record: dict, state: Mapping[str, Any] | None) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        thread = record.get("thread_id")
        if thread:
            attrs["switchboard.thread_id"] = attrs["gen_ai.conversation.id"] = str(thread)
        tenant = _tenant(state)
        if tenant:
            attrs["switchboard.tenant_id"] = tenant
        for name in ("run_id", "turn", "task_id", "state_version"):
            if record.get(name) is not None:
                attrs[f"switchboard.{name}"] = record[name]
        return attrs

    def _parent(self, record: dict) -> Any:
        visit = self._visits.get((record.get("run_id"), str(record.get("task_ns") or "")))
        run = self._runs.get(record.get("run_id"))
        span = visit.span if visit is not None else run.span if run is not None else None
        return trace.set_span_in_context(span) if span is not None else None

    def _visit(self, record: dict) -> _Visit | None:
        return self._visits.get((record.get("run_id"), str(record.get("task_ns") or "")))

    # ------------------------------------------------------------ runs
    def _run_started(self, record: dict, state: Mapping[str, Any] | None) -> None:
        detail = record.get("detail") or {}
        attrs = self._base(record, state) | {"switchboard.run.input": str(detail.get("input") or "message")}
        if detail.get("input") == "resume":
            value = detail.get("decision")
            attrs["switchboard.approval.decision"] = decision_type(value) or "unknown"
            attrs["switchboard.approval.resume_shape"] = _shape(value)
        span = self.tracer.start_span("switchboard run", attributes=attrs, start_time=_now())
        self._runs[record.get("run_id")] = _Run(span)

    def _run_ended(self, record: dict, state: Mapping[str, Any] | None) -> None:
        run = self._runs.pop(record.get("run_id"), None)
        if run is None:
            return
        span = run.span
        for name in ("turn", "task_id", "state_version"):
            if record.get(name) is not None:
                span.set_attribute(f"switchboard.{name}", record[name])
        span.set_attribute("switchboard.status", str(record.get("status") or ""))
        if record.get("to_agent"):
            span.set_attribute("switchboard.agent", str(record["to_agent"]))
        if record["kind"] == "run_failed":
            span.set_status(Status(StatusCode.ERROR, _error_class(record.get("reason"))))
        span.end(end_time=_now())

    # ------------------------------------------------------------ node visits
    def _visit_started(self, record: dict, state: Mapping[str, Any] | None) -> None:
        agent = str(record.get("agent") or "")
        attrs = self._base(record, state) | {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent}
        for name, key in (("from_agent", "switchboard.from_agent"), ("via", "switchboard.via"), ("hop", "switchboard.hop"),
                          ("fingerprint", "switchboard.fingerprint")):
            if record.get(name) is not None:
                attrs[key] = record[name]
        run = self._runs.get(record.get("run_id"))
        if run is not None and not run.tenant and "switchboard.tenant_id" in attrs:
            run.span.set_attribute("switchboard.tenant_id", attrs["switchboard.tenant_id"])
            run.tenant = True
        span = self.tracer.start_span(f"invoke_agent {agent}", context=self._parent(record), attributes=attrs,
                                      start_time=_now())
        visit = _Visit(span, state)
        self._visits[(record.get("run_id"), str(record.get("task_ns") or ""))] = visit
        if agent == "human_approval":
            visit.approval = self.tracer.start_span(
                "approval", context=trace.set_span_in_context(span), start_time=_now(),
                attributes=self._base(record, state) | {"switchboard.approval.action": "refund"})

    def _visit_finished(self, record: dict, state: Mapping[str, Any] | None) -> None:
        visit = self._visits.pop((record.get("run_id"), str(record.get("task_ns") or "")), None)
        if visit is None:
            return
        now = _now()
        status = str(record.get("status") or "")
        for spans in visit.open.values():  # requested, never answered: ended with the visit
            for span in spans:
                span.set_attribute("switchboard.outcome", "not_taken")
                span.end(end_time=now)
        if visit.approval is not None:
            if status != "interrupted":
                visit.approval.set_attribute("switchboard.approval.next", str(record.get("to_agent") or status))
            visit.approval.end(end_time=now)
        visit.span.set_attribute("switchboard.status", status)
        if record.get("to_agent"):
            visit.span.set_attribute("switchboard.to_agent", str(record["to_agent"]))
        if status in ("error", "timeout"):
            visit.span.set_status(Status(StatusCode.ERROR, _error_class(record.get("reason")) if status == "error"
                                         else "timeout"))
        visit.span.end(end_time=now)

    # ------------------------------------------------------------ inside a visit
    def _model_called(self, record: dict, state: Mapping[str, Any] | None) -> None:
        end = _now()
        latency = _f(record, "latency_ms")
        start = end - int(float(latency) * 1e6) if isinstance(latency, (int, float)) else end
        model = str(record.get("model") or "unknown")
        attrs = self._base(record, state) | {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
        for name, key in (("input_tokens", "gen_ai.usage.input_tokens"), ("output_tokens", "gen_ai.usage.output_tokens"),
                          ("history_items", "switchboard.history_items")):
            if record.get(name) is not None:
                attrs[key] = record[name]
        if _f(record, "tool_calls") is not None:
            attrs["switchboard.tool_calls"] = int(_f(record, "tool_calls"))
        span = self.tracer.start_span(f"chat {model}", context=self._parent(record), attributes=attrs, start_time=start)
        if record.get("status") in ("error", "timeout"):
            span.set_status(Status(StatusCode.ERROR, _error_class(record.get("reason"))))
        span.end(end_time=end)

    def _tool_called(self, record: dict, state: Mapping[str, Any] | None) -> None:
        tool, call = str(_f(record, "tool") or "unknown"), _f(record, "call_id")
        attrs = self._base(record, state) | {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                                             "switchboard.side_effect": bool(_f(record, "side_effect"))}
        if call:
            attrs["gen_ai.tool.call.id"] = str(call)
        span = self.tracer.start_span(f"execute_tool {tool}", context=self._parent(record), attributes=attrs,
                                      start_time=_now())
        self._open(record, ("tool", str(call or tool)), span)

    def _tool_finished(self, record: dict, state: Mapping[str, Any] | None) -> None:
        tool = str(_f(record, "tool") or "unknown")
        span = self._close(record, ("tool", str(_f(record, "call_id") or tool)))
        if span is None:  # answered without a call being started here (e.g. the paused dialogue's read-only answer)
            span = self.tracer.start_span(f"execute_tool {tool}", context=self._parent(record), start_time=_now(),
                                          attributes=self._base(record, state) | {"gen_ai.operation.name": "execute_tool",
                                                                                   "gen_ai.tool.name": tool})
        status = str(record.get("status") or "")
        span.set_attribute("switchboard.status", status)
        if status == "error":
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=_now())

    def _handoff_requested(self, record: dict, state: Mapping[str, Any] | None) -> None:
        span = self.tracer.start_span(_handoff_name(record), context=self._parent(record), start_time=_now(),
                                      attributes=self._handoff_attrs(record, state))
        self._open(record, ("handoff", str(record.get("to_agent") or "")), span)

    def _handoff_ended(self, record: dict, state: Mapping[str, Any] | None) -> None:
        span = self._close(record, ("handoff", str(record.get("to_agent") or "")))
        if span is None:
            span = self.tracer.start_span(_handoff_name(record), context=self._parent(record), start_time=_now())
        accepted = record["kind"] == "handoff_accepted"
        attrs = self._handoff_attrs(record, state)
        if not accepted and "switchboard.handoff.reason" in attrs:  # the request's reason stays; this is why not
            attrs["switchboard.handoff.refusal_reason"] = attrs.pop("switchboard.handoff.reason")
        span.set_attributes(attrs)
        span.set_attribute("switchboard.outcome", "accepted" if accepted else "refused")
        if not accepted and record.get("status"):
            span.set_attribute("switchboard.handoff.refusal", str(record["status"]))
        span.end(end_time=_now())

    def _handoff_attrs(self, record: dict, state: Mapping[str, Any] | None) -> dict[str, Any]:
        attrs = self._base(record, state) | {"switchboard.handoff.from": str(record.get("from_agent") or ""),
                                             "switchboard.handoff.to": str(record.get("to_agent") or "")}
        reason = safe_reason(record.get("reason"), state)
        if reason:
            attrs["switchboard.handoff.reason"] = reason
        for name, key in (("fingerprint", "switchboard.handoff.fingerprint"),
                          ("history_items", "switchboard.handoff.history_items")):
            if record.get(name) is not None:
                attrs[key] = record[name]
        for name in ("hop", "handoff_id"):
            if _f(record, name) is not None:
                attrs[f"switchboard.handoff.{name}"] = _f(record, name)
        return attrs

    def _open(self, record: dict, key: tuple[str, str], span: Span) -> None:
        visit = self._visit(record)
        if visit is not None:
            visit.open.setdefault(key, []).append(span)
        else:
            span.end(end_time=_now())

    def _close(self, record: dict, key: tuple[str, str]) -> Span | None:
        visit = self._visit(record)
        spans = visit.open.get(key) if visit is not None else None
        if not spans:
            return None
        span = spans.pop(0)
        if not spans and visit is not None:
            del visit.open[key]
        return span

    # ------------------------------------------------------------ the approval
    def _interrupt(self, record: dict, state: Mapping[str, Any] | None) -> None:
        visit = self._visit(record)
        payload = (record.get("detail") or {}).get("payload")
        if visit is None or visit.approval is None or not isinstance(payload, Mapping):
            self._span_event(record, state)
            return
        span = visit.approval
        span.set_attribute("switchboard.approval.next", "awaiting_approval")
        for name in ("refund_id", "task_id"):
            if payload.get(name):
                span.set_attribute(f"switchboard.approval.{name}", str(payload[name]))
        span.set_attribute("switchboard.approval.approvals_required", int(payload.get("approvals_required") or 1))
        span.set_attribute("switchboard.approval.approvals", len(payload.get("approvals") or ()))
        span.add_event("paused", timestamp=_now())

    def _resumed(self, record: dict, state: Mapping[str, Any] | None) -> None:
        visit = self._visit(record)
        value = (record.get("detail") or {}).get("decision")
        target = visit.approval if visit is not None and visit.approval is not None else None
        attrs = {"switchboard.approval.decision": decision_type(value) or "unknown",
                 "switchboard.approval.resume_shape": _shape(value)}
        if target is not None:
            target.set_attributes(attrs)
            target.add_event("resumed", attributes=attrs, timestamp=_now())

    def _denied(self, record: dict, state: Mapping[str, Any] | None) -> None:
        visit = self._visit(record)
        target = (visit.approval or visit.span) if visit is not None else None
        if target is not None:
            target.add_event("access_denied", timestamp=_now(), attributes={
                "switchboard.action": str(_f(record, "action") or ""),
                "switchboard.principal_kind": _principal_kind(_f(record, "principal"))})

    def _span_event(self, record: dict, state: Mapping[str, Any] | None) -> None:
        """Other kinds (entry_decided, loop_detected, expert_called, …): an event on the visit's span (or the run's),
        with the agents and status, never the reason's text."""
        visit = self._visit(record)
        run = self._runs.get(record.get("run_id"))
        target = visit.span if visit is not None else run.span if run is not None else None
        if target is None:
            return
        attrs = {f"switchboard.{k}": str(record[k]) for k in ("from_agent", "to_agent", "status") if record.get(k)}
        if _f(record, "type"):
            attrs["switchboard.type"] = str(_f(record, "type"))
        if record.get("fingerprint"):
            attrs["switchboard.fingerprint"] = str(record["fingerprint"])
        target.add_event(record["kind"], attributes=attrs, timestamp=_now())


def _f(record: dict, name: str) -> Any:
    """Field ``name`` of an emitted record: at its top (``emit``'s keyword arguments, split into columns and
    ``detail`` only when stored) or in its ``detail``."""
    if record.get(name) is not None:
        return record[name]
    detail = record.get("detail")
    return detail.get(name) if isinstance(detail, Mapping) else None


def _handoff_name(record: dict) -> str:
    return f"handoff {record.get('from_agent') or '?'} → {record.get('to_agent') or '?'}"


def _shape(value: Any) -> str:
    return "hitl" if isinstance(value, Mapping) and "decisions" in value else "switchboard"


def _tenant(state: Mapping[str, Any] | None) -> str:
    owner = owner_of(state or {})
    return owner[1] if owner is not None else ""
