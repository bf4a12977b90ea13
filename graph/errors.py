"""One error hierarchy, split by who is at fault (DESIGN.md, Style; as openai-agents' UserError vs ModelBehaviorError).

::

    SwitchboardError                 base: the CLI prints the message on one line and exits non-zero
    ├── ConfigError                  the operator's configuration is wrong (missing key, bad model name, bad setting)
    ├── InputError                   the caller's input is wrong (malformed CSV, unknown thread, bad decision)
    │   ├── AccessDenied             the caller may not do this (another customer's thread, missing role)
    │   └── ThreadDeleted            the thread was deleted: nothing of it may be written again
    ├── InfrastructureError          a storage or network fault (disk full, read-only, corrupt file, lost connection)
    └── ModelBehaviorError           a model broke the contract in a way the policies could not absorb

A refused handoff or a refused tool call is *not* an exception: it is recorded as an event and answered with a
ToolMessage; ``ModelBehaviorError`` is for the rare case where code must stop (e.g. a tool called with arguments
that fail its schema, before the refusal is turned into a ToolMessage).

This module imports nothing of the project, so every layer may raise these errors.
"""

from __future__ import annotations

__all__ = ["SwitchboardError", "ConfigError", "InputError", "AccessDenied", "ThreadDeleted", "InfrastructureError",
           "ModelBehaviorError"]


class SwitchboardError(Exception):
    """Base of switchboard's own errors; the CLI prints the message on one line and exits non-zero."""


class ConfigError(SwitchboardError):
    """The configuration is wrong (missing key, bad model name, unreadable file, a setting out of range): the
    operator must fix it. CLI exit code 2."""


class InputError(SwitchboardError):
    """The caller's input is wrong (malformed CSV, unknown thread, bad decision): one-line message, nothing
    changed. CLI exit code 2."""


class AccessDenied(InputError):
    """The caller is not allowed to do this (another customer's thread, a missing role): nothing changed, the
    refusal is recorded. CLI exit code 2."""


class ThreadDeleted(InputError):
    """A checkpoint write for a thread that was deleted (``delete_thread``), e.g. the next step of a run that was in
    flight when its thread was deleted: the savers refuse it (``checkpoints.sqlite_saver``, ``checkpoints.postgres``),
    so the run stops there and the thread stays deleted. CLI exit code 2."""


class InfrastructureError(SwitchboardError):
    """A storage or network fault outside the caller's control (disk full, read-only file system, corrupt
    database, lost connection). The message names the resource and the cause. CLI exit code 2."""


class ModelBehaviorError(SwitchboardError):
    """A model broke the tool or handoff contract (unknown tool, arguments that fail the schema). Normally caught by
    the agent runtime and answered with a refusing ToolMessage; it reaches a caller only from direct tool use."""
