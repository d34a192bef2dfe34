"""`python -m pytest_harness`: the `pytest-harness` console script."""

from pytest_harness.cli import console

console()
