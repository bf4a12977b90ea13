"""Tool calls a model wrote as text instead of through the tool-calling interface.

Small local models often answer with ``transfer_to_refunds(reason="…")``, a JSON object naming a tool, or
``<tool_call>{…}</tool_call>`` tags. Such text must never reach the customer. :func:`read_text_tool_calls` finds these
forms; the agent runtime (``nodes.agent``) turns one call of a known tool with a JSON-object argument into a real tool
call (which then goes through the same policy checks), and otherwise retries once, then falls back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["TextToolCalls", "read_text_tool_calls"]

_TAG_RE = re.compile(r"<\s*(?:tool_call|function_call|tool_use)\s*>(.*?)(?:<\s*/\s*(?:tool_call|function_call|tool_use)\s*>|$)",
                     re.S | re.I)
_FENCE_RE = re.compile(r"```(?:json|tool_call|python)?\s*(.*?)```", re.S | re.I)
_FUNC_RE = re.compile(r"^\s*`?([A-Za-z_][A-Za-z0-9_]*_[A-Za-z0-9_]+)\s*\((.*)\)\s*`?\s*$", re.S)
_KWARG_RE = re.compile(r"""([A-Za-z_]\w*)\s*=\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'"""
                       r"""|-?\d+(?:\.\d+)?|true|false|True|False|None|null)""")


@dataclass(frozen=True)
class TextToolCalls:
    """What a model's text holds.

    Attributes:
        form: ``none`` (plain prose), ``tool_call_tag``, ``json`` or ``function_call``.
        calls: the calls found, each ``{"name": str, "args": dict | None}`` (None: the arguments did not parse).
        usable: exactly one call, of a name in ``known``, with a JSON-object argument: it can become a real call.
        problem: why it is not usable ("" when usable or when ``form`` is ``none``).
    """

    form: Literal["none", "tool_call_tag", "json", "function_call"]
    calls: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    usable: bool = False
    problem: str = ""


def _json_call(obj: Any) -> dict[str, Any] | None:
    """``{"name", "args"}`` when ``obj`` is a JSON object naming a tool (OpenAI, Hermes and common ad-hoc shapes)."""
    if not isinstance(obj, dict):
        return None
    inner = obj.get("function")
    fn: dict[str, Any] = inner if isinstance(inner, dict) else obj
    name = fn.get("name") or obj.get("tool") or obj.get("tool_name")
    if not isinstance(name, str) or not name:
        return None
    args: Any = next((fn.get(k) for k in ("arguments", "args", "parameters", "input") if k in fn), {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = None
    return {"name": name, "args": args if isinstance(args, dict) else None}


def _json_objects(text: str) -> list[Any]:
    """Every JSON value that a fenced block holds, or the whole text when it is JSON."""
    chunks = _FENCE_RE.findall(text) or [text]
    out = []
    for chunk in chunks:
        try:
            value = json.loads(chunk.strip())
        except ValueError:
            continue
        out.extend(value if isinstance(value, list) else [value])
    return out


def _unquote(raw: str) -> str:
    try:
        return str(json.loads(raw))
    except ValueError:
        return raw[1:-1]


def _function_call(text: str) -> dict[str, Any] | None:
    m = _FUNC_RE.match(text.strip().strip("`").strip())
    if not m:
        return None
    name, inner = m.group(1), m.group(2).strip()
    if not inner:
        return {"name": name, "args": {}}
    if inner.startswith("{"):
        try:
            value = json.loads(inner)
            return {"name": name, "args": value if isinstance(value, dict) else None}
        except ValueError:
            return {"name": name, "args": None}
    pairs = _KWARG_RE.findall(inner)
    if not pairs or _KWARG_RE.sub("", inner).strip(" ,\n"):
        return {"name": name, "args": None}
    args: dict[str, Any] = {}
    for key, raw in pairs:
        if raw[0] == '"':
            args[key] = _unquote(raw)
        elif raw[0] == "'":
            args[key] = raw[1:-1].replace("\\'", "'")
        elif raw in ("true", "True", "false", "False"):
            args[key] = raw in ("true", "True")
        elif raw in ("None", "null"):
            args[key] = None
        else:
            args[key] = float(raw) if "." in raw else int(raw)
    return {"name": name, "args": args}


def read_text_tool_calls(text: str, known: Collection[str]) -> TextToolCalls:
    """Find tool calls written as text in ``text``; ``known`` = the tool names bound to the agent.

    Forms, in order: ``<tool_call>…</tool_call>`` tags (JSON inside), a JSON object or list of objects naming a tool
    (``{"name", "arguments"}``, ``{"function": {…}}``, ``{"tool", "args"}``; bare or in a fenced block), and
    function-call syntax ``snake_name(key="value", …)`` or ``snake_name({…})`` as the whole message. Prose that
    merely mentions a tool is not a call.
    """
    text = text or ""
    form: Literal["none", "tool_call_tag", "json", "function_call"] = "none"
    calls: list[dict[str, Any]] = []
    tags = _TAG_RE.findall(text)
    if tags:
        form = "tool_call_tag"
        for body in tags:
            found: list[dict[str, Any] | None] = [c for c in (_json_call(o) for o in _json_objects(body)) if c]
            calls.extend(c if c else {"name": "", "args": None} for c in (found or [_function_call(body)]))
    else:
        found_json = [c for c in (_json_call(o) for o in _json_objects(text)) if c]
        if found_json:
            form, calls = "json", found_json
        elif (fc := _function_call(text)) is not None:
            form, calls = "function_call", [fc]
    if form == "none":
        return TextToolCalls("none")
    problem = ""
    if len(calls) != 1:
        problem = f"{len(calls)} tool calls written as text"
    elif calls[0]["name"] not in known:
        problem = f"unknown tool {calls[0]['name'] or '?'!r} written as text"
    elif calls[0]["args"] is None:
        problem = f"the arguments of {calls[0]['name']} written as text are not a JSON object"
    return TextToolCalls(form, tuple(calls), usable=not problem, problem=problem)
