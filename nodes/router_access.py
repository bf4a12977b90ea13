"""The one way the desk gets its intent router: :class:`LazyRouter`, used by the builder's dependencies and by the
offline model when it is given none. This module imports nothing heavy: ``nodes.router`` (numpy, the classifier)
is loaded on the first route."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

__all__ = ["LazyRouter"]


class LazyRouter:
    """Loads ``nodes.router.load_router(path)`` on first use, so commands that never route (pending, resume,
    draw) do not pay for loading the classifier, and memoises the last ``cache_size`` texts: one turn
    routes the same message up to three times (entry, triage, the specialist's misroute check)."""

    def __init__(self, path: Path | None = None, router: Any = None, cache_size: int = 256):
        self._path = path
        self._router: Any = router
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._size = cache_size
        self._lock = threading.Lock()

    def _get(self) -> Any:
        if self._router is None:
            from nodes.router import load_router  # deferred: numpy and the classifier, on the first route

            self._router = load_router(self._path)
        return self._router

    def route(self, text: str) -> Any:
        """The loaded router's ``route(text)``, memoised (routes are deterministic for a fitted router)."""
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        result = self._get().route(text)
        with self._lock:
            self._cache[text] = result
            if len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return result

    def __getattr__(self, name: str) -> Any:
        # Only public attributes reach the router: probes such as LangGraph's ``hasattr(node, "__self__")`` at
        # compile time, copy/pickle dunders or a missing ``_router`` must not load (or recurse into) it.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._get(), name)
