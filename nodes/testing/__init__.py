"""Test doubles of switchboard, in one place (DESIGN.md: "scripted test models in one testing module").

- :mod:`nodes.testing.scripted`: chat models that follow a script or misbehave on purpose (ping-pong, illegal
  targets, parallel handoffs) and a keyword router, for tests, benchmarks and examples; no network.
- :mod:`nodes.testing.openai_stub`: a strict OpenAI-compatible HTTP server on 127.0.0.1 that plays a script and
  rejects malformed requests the way strict backends do.
- :mod:`nodes.testing.ledger`: business-store set-ups (a refund approved the way the approval flow approves one).
- :mod:`nodes.testing.served`: ``switchboard serve`` launched for a test module, its clients and its ledger.
- :mod:`nodes.testing.http_attacks`: the HTTP attacks on the money path that the service tests run on each engine.
- :mod:`nodes.testing.state`: thread set-ups (the graph without its input gate) and a handoff packet with
  placeholders (``packet``).

Nothing here is imported by the desk itself.
"""
