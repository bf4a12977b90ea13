"""One error hierarchy, split by who is at fault (DESIGN.md, Style; as openai-agents' UserError vs ModelBehaviorError).

Every exception switchboard raises is a :class:`SwitchboardError`; the CLI (``graph.app.cli.main``) prints its message as
one line ``error: <message>`` on stderr and exits 2 (:class:`~graph.app.cli.Interrupted`: 130). Classes defined in other
modules are listed with their module::

    SwitchboardError                 base
    ├── ConfigError                  the operator's configuration is wrong (missing key, bad model name, bad setting)
    ├── InputError                   the caller's input is wrong (malformed CSV, unknown thread, bad decision)
    │   ├── AccessDenied             the caller may not do this (another customer's thread, missing role)
    │   └── ThreadDeleted            the thread was deleted: nothing of it may be written again
    ├── ModelBehaviorError           a model broke the tool contract
    │   └── ToolArgumentError        unknown tool, another agent's tool, arguments that fail the schema  (nodes.tools)
    ├── InfrastructureError          a storage or network fault (disk full, read-only, corrupt file, lost connection)
    │   ├── StorageUnavailable       the business database cannot be used          (checkpoints.business.records)
    │   │   └── MissingBusinessStore the business database file went missing       (checkpoints.business.faults)
    │   ├── ToolUnavailable          a business tool kept failing after its retries                 (nodes.tool_runner)
    │   ├── Unreadable               the read-only checkpoint reader cannot read this file  (checkpoints.sqlite_reader)
    │   └── LookupUnavailable        the read-only operator look-up cannot read this file
    │                                                                     (checkpoints.business.operator_lookup)
    ├── StoreError                   the business store refused or failed a request (checkpoints.business.records)
    │   ├── StaleVersionError        a compare-and-swap write lost the race
    │   ├── BusinessRuleError        the request breaks a business rule
    │   │   ├── PaymentNotAuthorized the store's records do not allow the payment
    │   │   └── NotFoundError        no such row (or another customer's)
    │   ├── OwnershipError           the writer no longer owns the task
    │   └── StorageUnavailable       (also an InfrastructureError, above)
    └── Interrupted                  Ctrl-C cut a CLI command short: exit 130                             (graph.app.cli)

``StorageUnavailable`` is both a ``StoreError`` (every business-store failure is caught by ``except StoreError``) and an
``InfrastructureError`` (every storage fault is caught by ``except InfrastructureError``). ``Unreadable`` and
``LookupUnavailable`` are caught by the CLI's read commands, which then open the store through its full API.

A refused handoff or a refused tool call is *not* an exception that reaches a caller: ``ToolArgumentError`` is caught
by the tool runner and answered with a refusing ToolMessage; it reaches a caller only from direct use of
``nodes.tools.run_tool``.

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
    """A model broke the tool contract (unknown tool, another agent's tool, arguments that fail the schema): raised
    as :class:`nodes.tools.ToolArgumentError`. Caught by the tool runner and answered with a refusing ToolMessage; it
    reaches a caller only from direct tool use."""
