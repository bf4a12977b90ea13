"""Model selection: one code path for every model (DESIGN.md, Models)."""

from __future__ import annotations

import os

from langchain_core.language_models import BaseChatModel

from graph.errors import ConfigError

__all__ = ["make_model"]


def make_model(spec: str = "offline", *, timeout_s: float = 30.0, max_retries: int = 2, router=None) -> BaseChatModel:
    """Build the chat model named by ``spec``.

    Args:
        spec: ``"offline"`` (embedded, no key, no network) or ``"openai:<model>"`` (langchain-openai; honours
            ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` for any OpenAI-compatible server).
        timeout_s: request timeout in seconds (OpenAI path).
        max_retries: client retries on 429/5xx/connection errors, with the client's exponential backoff.
        router: optional IntentRouter for the offline model.

    Raises:
        ConfigError: unknown spec, empty model name, or ``OPENAI_API_KEY`` missing.
    """
    spec = (spec or "offline").strip()
    if spec == "offline":
        from nodes.offline_model import OfflineChatModel

        return OfflineChatModel(router=router)
    if spec.startswith("openai:"):
        name = spec.split(":", 1)[1].strip()
        if not name:
            raise ConfigError("--model openai:<name> needs a model name, e.g. openai:gpt-4o-mini")
        if not os.environ.get("OPENAI_API_KEY"):
            raise ConfigError("OPENAI_API_KEY is not set; export it (any value for a local server that ignores keys)")
        from langchain_openai import ChatOpenAI

        kwargs = {"model": name, "timeout": timeout_s, "max_retries": max_retries, "temperature": 0}
        if os.environ.get("OPENAI_BASE_URL"):
            kwargs["base_url"] = os.environ["OPENAI_BASE_URL"]
        return ChatOpenAI(**kwargs)
    raise ConfigError(f"unknown model {spec!r}; use 'offline' or 'openai:<model>'")
