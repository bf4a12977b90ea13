"""Test doubles of switchboard, in one place (DESIGN.md: "scripted test models in one testing module").

- :mod:`nodes.testing.scripted`: chat models that follow a script or misbehave on purpose (ping-pong, illegal
  targets, parallel handoffs) and a keyword router, for tests, benchmarks and examples; no network.
- :mod:`nodes.testing.openai_stub`: a strict OpenAI-compatible HTTP server on 127.0.0.1 that plays a script and
  rejects malformed requests the way strict backends do.

Nothing here is imported by the desk itself.
"""
