"""Tests of the runtime and the models (nodes/)."""
