"""The contracts: state schema, packet, run context, settings, typed results, events, views, errors. A leaf:
imports nothing of the project above it."""
