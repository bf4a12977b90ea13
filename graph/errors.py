"""Errors by who is at fault (DESIGN.md, Style)."""

from __future__ import annotations

__all__ = ["SwitchboardError", "ConfigError", "InputError"]


class SwitchboardError(Exception):
    """Base of switchboard's own errors; the CLI prints the message on one line and exits non-zero."""


class ConfigError(SwitchboardError):
    """The configuration is wrong (missing key, bad model name, unreadable file): the operator must fix it."""


class InputError(SwitchboardError):
    """The user's input is wrong (malformed CSV, unknown thread, bad decision): one-line message, nothing changed."""
