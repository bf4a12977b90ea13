"""Tests of the desk's CLI, tools and service (graph/)."""
