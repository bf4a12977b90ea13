"""Tests of the contracts (graph/contracts/)."""
