"""Run the switchboard CLI and send it a real Ctrl-C (SIGINT to itself) at a chosen point of a turn, for the
interruption tests: ``python -m tests.sigint_at POINT ARGS…``.

POINT is ``before-run`` (after the message passed its checks, before the graph stores anything) or a node name (as
that node starts, after the checkpoints of the nodes before it). The signal is the one Ctrl-C sends, handled by
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


def main() -> None:
    """Install the interruption at ``sys.argv[1]`` and run ``graph.cli.main`` on the remaining arguments."""
    point, args = sys.argv[1], sys.argv[2:]
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as an interactive shell's child gets it
    from graph.conversation import Conversation
    from nodes.instrumentation import EventRecorder

    fired: list[bool] = []
    if point == "before-run":
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
    from graph.cli import main as cli_main

    sys.argv = ["switchboard", *args]
    cli_main()


if __name__ == "__main__":
    main()
