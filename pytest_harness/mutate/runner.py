"""Replay every recording against every mutant of a spec, in one process.

One world is loaded once: the spec's tools (imported and their schemas built), the recordings
(read and parsed). Each mutant is loaded with `load_spec(edit=...)`, so it passes every check a
spec file does, and gets its own `Harness` over those same tools; no model is called and no tool
runs (a replay answers both from the recording). A mutant is killed when at least one replay
differs from its recording in status, output or decisions, or diverges; it survives when every
replay comes out the same.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pytest_harness.errors import HarnessError
from pytest_harness.mutate.operators import Mutant, make_mutants

if TYPE_CHECKING:
    from pytest_harness.recording.model import Recording
    from pytest_harness.runtime.harness import Harness

__all__ = [
    "MutantResult",
    "MutationError",
    "MutationReport",
    "find_recordings",
    "mutate",
]

RECORDING_SUFFIXES = (".yaml", ".yml", ".hx")
Status = Literal["killed", "survived", "invalid"]


class MutationError(HarnessError):
    """`mutate` cannot score: no recordings, or one that does not load or already drifts.

    A mutant is judged against recordings that replay `same` on the unchanged spec.
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class MutantResult:
    """How the recordings fared against one mutant."""

    mutant: Mutant
    status: Status
    drifted: tuple[str, ...] = ()
    """The recordings whose replay drifted or diverged (a killed mutant has at least one)."""
    error: str | None = None
    """Why an invalid mutant did not load."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, exactly DESIGN §16's keys (the text report says why one is invalid)."""
        return {
            "id": self.mutant.id,
            "description": self.mutant.description,
            "target": self.mutant.target,
            "status": self.status,
            "drifted": list(self.drifted),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class MutationReport:
    """Every mutant's outcome and the score: killed / (killed + survived)."""

    spec: str
    recordings: tuple[str, ...]
    results: tuple[MutantResult, ...] = field(default_factory=tuple)
    seconds: float = 0.0

    @property
    def killed(self) -> int:
        """Mutants some recording caught."""
        return sum(1 for r in self.results if r.status == "killed")

    @property
    def total(self) -> int:
        """Mutants that loaded (invalid ones are not counted)."""
        return sum(1 for r in self.results if r.status != "invalid")

    @property
    def ratio(self) -> float | None:
        """The score: killed / total, or None when no mutant loaded."""
        return self.killed / self.total if self.total else None

    @property
    def survivors(self) -> list[MutantResult]:
        """The mutants no recording caught."""
        return [r for r in self.results if r.status == "survived"]

    def to_dict(self) -> dict[str, Any]:
        """`{"score": {"killed", "total", "ratio"}, "mutants": [...]}` (DESIGN §16)."""
        ratio = self.ratio
        return {
            "score": {
                "killed": self.killed,
                "total": self.total,
                "ratio": None if ratio is None else round(ratio, 4),
            },
            "mutants": [r.to_dict() for r in self.results],
        }

    def render(self) -> str:
        """A table of the mutants, the score, and what each survivor leaves unprotected."""
        lines = [
            f"mutants of {self.spec}, replayed against {_count(len(self.recordings), 'recording')}:"
        ]
        width = max((len(r.mutant.id) for r in self.results), default=0)
        for r in self.results:
            if r.status == "killed":
                what = f"{_count(len(r.drifted), 'recording')} drifted"
            elif r.status == "invalid":
                what = f"did not load: {r.error}"
            else:
                what = "no recording drifted"
            lines.append(f"  {r.status:<8}  {r.mutant.id:<{width}}  {r.mutant.description}: {what}")
        lines.append(self.score_line())
        survivors = self.survivors
        if survivors:
            lines.append("survived (no golden run protects these; record one that exercises it):")
            lines += [f"  {r.mutant.unprotected}" for r in survivors]
        return "\n".join(lines)

    def score_line(self) -> str:
        """`score: 12 of 14 mutants killed (0.86); 1 invalid, not counted`."""
        invalid = len(self.results) - self.total
        ratio = self.ratio
        text = f"score: {self.killed} of {_count(self.total, 'mutant')} killed"
        text += "" if ratio is None else f" ({ratio:.2f})"
        if invalid:
            text += f"; {invalid} invalid (did not load), not counted"
        return f"{text}; {self.seconds:.1f}s"


def find_recordings(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The recording files given, and every one under the folders given, sorted."""
    found: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            found += sorted(
                p for p in path.rglob("*") if p.suffix in RECORDING_SUFFIXES and p.is_file()
            )
        elif path.is_file():
            found.append(path)
        else:
            raise MutationError(f"{path}: no such recording file or folder")
    return found


async def mutate(
    spec: str | os.PathLike[str],
    recordings: Sequence[str | os.PathLike[str]],
    *,
    env: str | None = None,
    select: Callable[[list[Mutant]], Sequence[Mutant]] | None = None,
) -> MutationReport:
    """Score how much of `spec`'s policy the `recordings` protect (DESIGN §16).

    `recordings` are files or folders. `select`, when given, picks (or adds to) the mutants
    the operators made before any is run.
    Raises `MutationError` when there is nothing to score or the recordings do not replay
    `same` against the unchanged spec, and `SpecError` when the spec itself does not load.
    """
    from pytest_harness.loading import load
    from pytest_harness.replay.replayer import load_source

    started = time.perf_counter()
    files = find_recordings(recordings)
    if not files:
        shown = ", ".join(map(str, recordings)) or "(none given)"
        raise MutationError(
            f"nothing to score: no recordings (.yaml, .hx) in {shown}; record golden runs "
            "first (pytest --record-recordings=new)"
        )
    async with load(spec, env=env, store="memory") as base:
        loaded: list[tuple[str, Recording]] = []
        for path in files:
            try:
                loaded.append((str(path), await load_source(base, path)))
            except (HarnessError, OSError) as exc:
                raise MutationError(f"{path}: cannot load the recording: {exc}") from None
        baseline = await _drifted(base, loaded)
        if baseline:
            raise MutationError(
                f"{_count(len(baseline), 'recording')} already drift against the unchanged "
                f"spec ({', '.join(baseline)}); mutants are judged against recordings that "
                "replay same: fix or update them first (pytest --replay-recordings)"
            )
        mutants = make_mutants(base.spec.document, [r for _, r in loaded])
        if select is not None:
            mutants = list(select(mutants))
        results = [await _judge(base, mutant, loaded) for mutant in mutants]
    return MutationReport(
        spec=str(spec),
        recordings=tuple(f for f, _ in loaded),
        results=tuple(results),
        seconds=time.perf_counter() - started,
    )


async def _judge(
    base: Harness, mutant: Mutant, loaded: Sequence[tuple[str, Recording]]
) -> MutantResult:
    from pytest_harness.runtime.harness import Harness
    from pytest_harness.runtime.plan import Plans
    from pytest_harness.spec.loader import load_spec
    from pytest_harness.store.memory import MemoryStore

    try:
        spec = load_spec(base.spec.path, env=base.spec.env or "", edit=mutant.apply)
        plans = Plans(spec, base.plans.tools)
    except HarnessError as exc:
        return MutantResult(mutant=mutant, status="invalid", error=str(exc))
    except (LookupError, TypeError) as exc:  # a key path the spec's data does not have
        where = ", ".join(".".join(map(str, path)) for path, _ in mutant.changes)
        problem = f"the spec has no {where} to change ({type(exc).__name__}: {exc})"
        return MutantResult(mutant=mutant, status="invalid", error=problem)
    async with Harness(spec, plans, MemoryStore()) as harness:
        drifted = await _drifted(harness, loaded)
    return MutantResult(
        mutant=mutant, status="killed" if drifted else "survived", drifted=tuple(drifted)
    )


async def _drifted(harness: Harness, loaded: Sequence[tuple[str, Recording]]) -> list[str]:
    """The recordings whose replay against `harness` fails the default gate (or cannot run)."""
    from pytest_harness.replay.report import DEFAULT_FAIL_ON

    out: list[str] = []
    for file, recording in loaded:
        try:
            report = await harness.replay(recording)
        except HarnessError:
            out.append(file)  # the mutant cannot even run it: that is a change too
            continue
        if report.failed(DEFAULT_FAIL_ON):
            out.append(file)
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
