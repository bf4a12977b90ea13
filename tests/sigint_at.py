"""Run the switchboard CLI and send it a real Ctrl-C (SIGINT to itself) at a chosen point of a turn, for the
interruption tests: ``python -m tests.sigint_at POINT ARGS…``.

POINT is ``before-run`` (after the message passed its checks, before the graph stores anything), a node name (as
that node starts, after the checkpoints of the nodes before it), ``print`` (after the answer's first line is printed,
before the rest of the turn), ``print-json`` (as ``chat --json`` starts printing) or ``prompt`` (as the interactive
session asks for a line). The signal is the one Ctrl-C sends, handled by
Python's default handler (``KeyboardInterrupt`` in the main thread at the next bytecode), so the point is exact and
no timing is involved.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from typing import Any


def _interrupt() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def _interrupt_while_printing(point: str, fired: list[bool]) -> None:
    """``print``: Ctrl-C right after the answer's first line is written, while ``chat`` prints the rest of the turn
    (the path line); ``print-json``: as ``chat --json`` starts printing its JSON document."""
    import graph.app.cli as cli

    if point == "print-json":
        print_json = cli.print_json

        def _print_json(data: Any) -> None:
            if not fired:
                fired.append(True)
                _interrupt()
            print_json(data)

        cli.print_json = _print_json
        return
    print_turn = cli._print_turn

    def _print_turn(r: Any) -> None:
        real = cli.console.print

        def print_then_interrupt(*a: Any, **kw: Any) -> None:
            real(*a, **kw)
            if not fired:
                fired.append(True)
                _interrupt()

        cli.console.print = print_then_interrupt  # type: ignore[method-assign]
        try:
            print_turn(r)
        finally:
            cli.console.print = real  # type: ignore[method-assign]

    cli._print_turn = _print_turn


def main() -> None:
    """Install the interruption at ``sys.argv[1]`` and run ``graph.app.cli.main`` on the remaining arguments."""
    point, args = sys.argv[1], sys.argv[2:]
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as an interactive shell's child gets it
    from graph.conversation import Conversation
    from nodes.instrumentation import EventRecorder

    fired: list[bool] = []
    if point in ("print", "print-json"):
        _interrupt_while_printing(point, fired)
    elif point == "prompt":  # the interactive session's prompt, before the first line is read
        import graph.app.cli as cli

        ask = cli.console.input

        def _input(*a: Any, **kw: Any) -> str:
            if not fired:
                fired.append(True)
                _interrupt()
            return ask(*a, **kw)

        cli.console.input = _input  # type: ignore[method-assign]
    elif point == "before-run":
        run = Conversation._run

        def _run(self: Any, graph_input: Any) -> Any:
            if not fired:
                fired.append(True)
                _interrupt()
            return run(self, graph_input)

        Conversation._run = _run  # type: ignore[method-assign]
    else:
        instrument = EventRecorder.instrument

        def instrumented(self: Any, name: str, fn: Any) -> Any:
            if name != point:
                return instrument(self, name, fn)

            @functools.wraps(fn)
            def node(*a: Any, **kw: Any) -> Any:
                if not fired:
                    fired.append(True)
                    _interrupt()
                return fn(*a, **kw)

            return instrument(self, name, node)

        EventRecorder.instrument = instrumented  # type: ignore[method-assign]
    from graph.app.cli import main as cli_main

    sys.argv = ["switchboard", *args]
    cli_main()


if __name__ == "__main__":
    main()
