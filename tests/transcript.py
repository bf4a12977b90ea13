"""Transcript validity check used by graph tests (the rule strict OpenAI-compatible backends apply)."""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage


def transcript_errors(messages: list[BaseMessage]) -> list[str]:
    """Every tool_call id (valid or invalid call) answered by exactly one ToolMessage placed after its AIMessage
    and before the next non-tool message; no orphan ToolMessages."""
    errors: list[str] = []
    open_ids: set[str] = set()
    answered: set[str] = set()
    for i, m in enumerate(messages):
        if isinstance(m, ToolMessage):
            if m.tool_call_id in answered:
                errors.append(f"#{i}: tool_call {m.tool_call_id} answered twice")
            elif m.tool_call_id not in open_ids:
                errors.append(f"#{i}: orphan ToolMessage {m.tool_call_id}")
            open_ids.discard(m.tool_call_id)
            answered.add(m.tool_call_id)
            continue
        if open_ids:
            errors.append(f"#{i}: tool_calls {sorted(open_ids)} unanswered before a {type(m).__name__}")
            open_ids = set()
        if isinstance(m, AIMessage):
            ids = [tc["id"] for tc in m.tool_calls] + [tc.get("id") for tc in m.invalid_tool_calls]
            if len(set(ids)) != len(ids):
                errors.append(f"#{i}: duplicate tool_call ids")
            open_ids = set(ids)
    if open_ids:
        errors.append(f"end: tool_calls {sorted(open_ids)} unanswered")
    return errors
