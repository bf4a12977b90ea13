"""Tests of whole conversations and the documentation, through every way in."""
