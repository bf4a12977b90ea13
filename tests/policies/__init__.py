"""Tests of the policies (policies/)."""
