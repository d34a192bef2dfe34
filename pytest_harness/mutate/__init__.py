"""Policy coverage: how much of a spec's policy the golden runs protect.

`mutate()` makes every single-point mutant of a spec (`operators`), replays every recording
against each one in one process (`runner`) and reports killed, survived and invalid mutants with
a score (DESIGN §16). The CLI's `pytest-harness mutate` prints it.
"""

from pytest_harness.mutate.operators import Mutant, make_mutants
from pytest_harness.mutate.runner import (
    MutantResult,
    MutationError,
    MutationReport,
    find_recordings,
    mutate,
)

__all__ = [
    "Mutant",
    "MutantResult",
    "MutationError",
    "MutationReport",
    "find_recordings",
    "make_mutants",
    "mutate",
]
