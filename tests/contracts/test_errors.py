"""The error hierarchy (graph/contracts/errors.py's module docstring): every class under SwitchboardError, split by who is at
fault, each raised somewhere; the CLI prints each infrastructure error as one line and exits 2."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from checkpoints.business.faults import MissingBusinessStore
from checkpoints.business.operator_lookup import LookupUnavailable
from checkpoints.business.records import (
    BusinessRuleError,
    NotFoundError,
    OwnershipError,
    PaymentNotAuthorized,
    StaleVersionError,
    StorageUnavailable,
    StoreError,
)
from checkpoints.sqlite_reader import Unreadable
from graph.app.cli import Interrupted
from graph.contracts.errors import (
    AccessDenied,
    ConfigError,
    InfrastructureError,
    InputError,
    ModelBehaviorError,
    SwitchboardError,
    ThreadDeleted,
)
from nodes.tool_runner import ToolUnavailable
from nodes.tools import ToolArgumentError

REPO = Path(__file__).resolve().parents[2]

#: Each class and its direct bases, as graph/contracts/errors.py's docstring draws the tree.
HIERARCHY: dict[type[Exception], tuple[type[Exception], ...]] = {
    SwitchboardError: (Exception,),
    ConfigError: (SwitchboardError,),
    InputError: (SwitchboardError,),
    AccessDenied: (InputError,),
    ThreadDeleted: (InputError,),
    ModelBehaviorError: (SwitchboardError,),
    ToolArgumentError: (ModelBehaviorError, ValueError),
    InfrastructureError: (SwitchboardError,),
    StorageUnavailable: (StoreError, InfrastructureError),
    MissingBusinessStore: (StorageUnavailable,),
    ToolUnavailable: (InfrastructureError,),
    Unreadable: (InfrastructureError,),
    LookupUnavailable: (InfrastructureError,),
    StoreError: (SwitchboardError,),
    StaleVersionError: (StoreError,),
    BusinessRuleError: (StoreError,),
    PaymentNotAuthorized: (BusinessRuleError,),
    NotFoundError: (BusinessRuleError,),
    OwnershipError: (StoreError,),
    Interrupted: (SwitchboardError,),
}

#: Bases that are only caught, never raised themselves.
ABSTRACT = {SwitchboardError, ModelBehaviorError}

INFRASTRUCTURE = [InfrastructureError, StorageUnavailable, MissingBusinessStore, ToolUnavailable, Unreadable,
                  LookupUnavailable]


@pytest.mark.parametrize("cls", list(HIERARCHY), ids=lambda c: c.__name__)
def test_each_class_has_the_bases_of_the_tree(cls):
    assert cls.__bases__ == HIERARCHY[cls]
    assert issubclass(cls, SwitchboardError)


def test_storage_unavailable_is_caught_as_a_store_error_and_as_an_infrastructure_error():
    for caught in (StoreError, InfrastructureError, SwitchboardError):
        with pytest.raises(caught):
            raise StorageUnavailable("business database x is unavailable: disk full")
    with pytest.raises(InfrastructureError):
        raise MissingBusinessStore("business database x is missing")


def test_the_tree_is_drawn_in_the_module_docstring():
    import graph.contracts.errors

    doc = graph.contracts.errors.__doc__ or ""
    for cls in HIERARCHY:
        assert re.search(rf"[├└]── {cls.__name__}\b", doc) or cls is SwitchboardError, cls.__name__


def test_every_concrete_class_is_raised_somewhere():
    source = "\n".join(p.read_text() for pkg in ("graph", "nodes", "policies", "checkpoints")
                       for p in (REPO / pkg).rglob("*.py"))
    for cls in set(HIERARCHY) - ABSTRACT:
        assert re.search(rf"raise {cls.__name__}\(", source), f"{cls.__name__} is never raised"


def _run_main(monkeypatch, exc: BaseException) -> SystemExit:
    from graph.app import cli

    def failing_app(**_kw):
        raise exc

    monkeypatch.setattr(cli, "app", failing_app)
    monkeypatch.setattr(sys, "argv", ["switchboard"])
    with pytest.raises(SystemExit) as info:
        cli.main()
    return info.value


@pytest.mark.parametrize("cls", INFRASTRUCTURE, ids=lambda c: c.__name__)
def test_cli_prints_an_infrastructure_error_as_one_line(monkeypatch, capsys, cls):
    message = f"business database /x/business.db is unavailable: disk full ({cls.__name__})"
    exc = cls(message, 3) if cls is ToolUnavailable else cls(message)
    code = _run_main(monkeypatch, exc).code
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err == f"error: {message}\n" and "Traceback" not in captured.out


def test_cli_exits_130_on_interrupted(monkeypatch, capsys):
    import signal

    monkeypatch.setattr(signal, "signal", lambda *_a: None)  # the CLI ignores a second Ctrl-C; pytest's must stay
    code = _run_main(monkeypatch, Interrupted("interrupted (Ctrl-C) at the prompt")).code
    assert code == 130 and capsys.readouterr().err.strip().splitlines() == ["interrupted (Ctrl-C) at the prompt"]
