"""Temporal execution (DESIGN §14): runs as `HarnessRun` workflows, workers that can die.

Needs the extra `pytest-harness[temporal]`; `pytest_harness.load()` imports it only when the
spec says `execution: {use: temporal}`.
"""

from pytest_harness.temporal.client import TemporalHarness, connect
from pytest_harness.temporal.worker import Worker

__all__ = ["TemporalHarness", "Worker", "connect"]
