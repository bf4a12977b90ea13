"""Tests of storage: checkpointers, the event log, the business store (checkpoints/)."""
