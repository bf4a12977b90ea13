"""The one tool runner shared by agents and experts: authorization, identity, timeout, retries, cached read, errors.

A business tool call goes through these steps, in order (DESIGN.md control-flow rules 4 and 5, and "retry is not a
loop"):

1. **authorization** from the run context (``policies.authz.authorize_tool``), never from model-written arguments:
   a refusal is a result ``{"ok": False, "error": "Refused: …"}``, not an exception;
2. **identity**: the tool receives a :class:`nodes.tools.ToolContext` built from the run context;
3. **timeout**: each attempt may take at most ``Settings.tool_timeout_s`` seconds;
4. **retries**: an infrastructure failure (an exception other than a bad argument) or a timeout is retried up to
   ``Settings.tool_retries`` attempts with exponential backoff from ``Settings.tool_backoff_s``; every failed attempt
   is counted (it changes the loop fingerprint, so a retry is never mistaken for a loop);
5. **cached read**: when a read-only tool keeps failing, its last good result for the same customer and arguments is
   returned, marked ``stale``;
6. otherwise :class:`ToolUnavailable` — the caller decides (an agent goes to fallback; an expert reports a failed
   sub-task).

Arguments that fail the tool's schema (the model's fault) become ``{"ok": False, "error": "Refused: …"}`` at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from graph.contracts.context import RunContext
from graph.contracts.errors import InfrastructureError
from nodes.deps import Deps
from nodes.tools import ToolArgumentError, ToolContext, ToolSpec, run_tool
from policies.authz import authorize_tool

__all__ = ["ToolUnavailable", "ToolRun", "ToolRunner", "call_with_timeout"]


class ToolUnavailable(InfrastructureError):
    """A business tool kept failing: retries and the cached alternative are exhausted (one-line message naming the
    tool, the attempts and the last error). ``attempts``: the failed attempts (int)."""

    def __init__(self, message: str, attempts: int = 0):
        super().__init__(message)
        self.attempts = attempts


@dataclass(frozen=True)
class ToolRun:
    """The result of one tool call through the runner.

    Attributes:
        result: the tool's JSON-able result dict (``ok`` False for a refusal; ``stale`` True for a cached read).
        failed_attempts: attempts that failed before this result (0..``tool_retries``).
        changed_state: True when a side-effecting tool changed business state (not a refusal, not a replay).
    """

    result: dict[str, Any]
    failed_attempts: int = 0
    changed_state: bool = False


def call_with_timeout(fn: Callable[..., dict], timeout_s: float, *args: Any) -> dict:
    """Run ``fn(*args)`` and wait at most ``timeout_s`` seconds (TimeoutError after; the call itself may finish in the
    background, which is why only read-only or idempotent tools run through here)."""
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(fn, *args).result(timeout=timeout_s)
    except FutureTimeout as exc:
        raise TimeoutError(f"no answer within {timeout_s:g} s") from exc
    finally:
        pool.shutdown(wait=False)


class ToolRunner:
    """Runs the business tools of one agent (or expert) visit.

    Args:
        specs: the tools this agent may run, by name.
        deps: store, settings (budgets), sleep, read cache.
        ctx: the run context (identity and roles).
        thread_id / task_id: the conversation and its task (for idempotency keys; task_id "" = none).
        turn: the thread's turn (graph state ``turn``) for card actions' idempotency keys, so a resumed turn replays
            its freeze while a later turn's freeze acts (``nodes.tools.ToolContext``); None: keys name the task only.
    """

    def __init__(self, specs: Mapping[str, ToolSpec], deps: Deps, ctx: RunContext, thread_id: str, task_id: str = "",
                 turn: int | None = None):
        self.specs, self.deps, self.ctx = specs, deps, ctx
        self.tool_ctx = ToolContext(customer_id=ctx.user_id or "", tenant_id=ctx.tenant_id, thread_id=thread_id,
                                    task_id=task_id or None, turn=turn)

    def run(self, name: str, args: Mapping[str, Any]) -> ToolRun:
        """Run tool ``name`` with the model's ``args`` (see the module doc for the steps).

        Raises:
            KeyError: ``name`` is not one of ``specs`` (the policies refuse unknown tools before this).
            ToolUnavailable: the tool failed ``tool_retries`` times and no cached read exists.
        """
        spec = self.specs[name]
        authz = authorize_tool(name, spec.side_effect, self.ctx.roles, self.ctx.user_id)
        if not authz.allowed:
            return ToolRun({"ok": False, "error": f"Refused: {authz.reason}"})
        settings = self.deps.settings
        retries = max(1, settings.tool_retries)
        cache_key = (self.ctx.user_id, name, json.dumps(dict(args), sort_keys=True, default=str))
        last_error: Exception | None = None
        for attempt in range(retries):
            try:
                result = call_with_timeout(run_tool, settings.tool_timeout_s, name, dict(args), self.deps.store,
                                           self.tool_ctx)
            except ToolArgumentError as exc:
                return ToolRun({"ok": False, "error": f"Refused: {exc}"}, attempt)
            except Exception as exc:  # noqa: BLE001 - infrastructure failure or timeout: bounded retry with backoff
                last_error = exc
                if attempt + 1 < retries:
                    self.deps.sleep(settings.tool_backoff_s * (2 ** attempt))
                continue
            ok = result.get("ok", True)
            if not spec.side_effect and ok:
                self.deps.read_cache[cache_key] = (time.time(), result)
            return ToolRun(result, attempt, changed_state=spec.side_effect and ok and not result.get("replayed"))
        error = f"{name} failed after {retries} attempts ({type(last_error).__name__}: {last_error})"
        cached = None if spec.side_effect else self.deps.read_cache.get(cache_key)
        if cached is not None:  # the alternative path: the last good read, marked stale
            at, result = cached
            return ToolRun({"stale": True, "cached_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)),
                            "note": f"live lookup failed; showing the last known result ({error})", **result}, retries)
        raise ToolUnavailable(error, retries)
