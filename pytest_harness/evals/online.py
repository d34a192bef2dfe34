"""Online evals (DESIGN §15): grade a share of ended runs in the background and store samples.

`OnlineEvals` is what the runtime holds when the spec has `evals.online.graders`. The run
loop tells it about each run it ends (`ended`), which returns at once: a sampled run is graded
in an asyncio task of its own, outside the run's path, so a grader that fails or is slow never
changes the run or delays its result. `flush()` waits for the grades started so far (the
harness calls it in `aclose()`). A grade whose process dies before it is stored is lost; the
run is unaffected.

Which runs are sampled is a pure function of the run id (`sampled`), so every process agrees,
and a run resumed elsewhere after an approval is sampled or not the same way.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from pytest_harness.evals.checks import GradeInput, GraderCheck, GraderError, Verdict
from pytest_harness.hookspecs import GraderFactory
from pytest_harness.runtime.results import RunResult
from pytest_harness.spec.schema import GraderSpec
from pytest_harness.spec.spec import KeyPath, Spec
from pytest_harness.store.base import Sample, Store

if TYPE_CHECKING:
    from pytest_harness.runtime.plan import Plans

__all__ = ["Grade", "Grader", "OnlineEvals", "build_graders", "sampled"]

log = logging.getLogger("pytest_harness.evals")


def sampled(run_id: str, share: float) -> bool:
    """Whether run `run_id` is graded when a `share` (0..1) of runs is.

    The run id's SHA-256 read as a number in [0, 1): below `share` is sampled. Deterministic,
    the same in every process.
    """
    if share <= 0:
        return False
    if share >= 1:
        return True
    digest = hashlib.sha256(run_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


@dataclass(frozen=True, slots=True, kw_only=True)
class Grade:
    """One grader's verdict on one outcome, before it is stored as a `Sample`."""

    grader: str
    score: float | None
    passed: bool
    detail: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (as a recording keeps it)."""
        return {
            "grader": self.grader,
            "score": self.score,
            "passed": self.passed,
            "detail": self.detail,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Grade:
        """Rebuild from `to_dict()`'s form."""
        score = data.get("score")
        return cls(
            grader=str(data["grader"]),
            score=None if score is None else float(score),
            passed=bool(data.get("passed")),
            detail=data.get("detail"),
            error=data.get("error"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Grader:
    """A built grader: its spec, its check, and whether it calls out of the process."""

    spec: GraderSpec
    check: GraderCheck
    plans: Plans | None = None

    @property
    def id(self) -> str:
        """The grader's id."""
        return self.spec.id

    @property
    def live(self) -> bool:
        """A judge on a live model: it calls out, so a replay does not re-grade with it."""
        if self.spec.check != "model" or self.plans is None:
            return False
        return bool(self.plans.provider(str(self.spec.model)).live)

    def applies(self, task: str) -> bool:
        """Whether the grader grades runs of `task`."""
        return self.spec.tasks is None or task in self.spec.tasks

    def subject(
        self, result: RunResult, input: str, principal: Mapping[str, Any] | None = None
    ) -> GradeInput:
        """What this grader looks at in `result`."""
        on_output = self.spec.on.value == "output"
        text = (result.output or "") if on_output else result.trace.render()
        return GradeInput(result=result, input=input, text=text, principal=principal or {})

    async def grade(
        self, result: RunResult, input: str, principal: Mapping[str, Any] | None = None
    ) -> Grade:
        """Grade one outcome; a failure (raised, timed out, a bad score) is the grade's `error`."""
        try:
            value = await asyncio.wait_for(
                self._call(self.subject(result, input, principal)), self.spec.timeout or None
            )
            score, detail = _score(value)
        except TimeoutError:
            return self._error(f"took longer than its timeout of {self.spec.timeout:g}s")
        except asyncio.CancelledError:
            raise
        except GraderError as exc:
            return self._error(str(exc))
        except Exception as exc:
            return self._error(f"{type(exc).__name__}: {exc}")
        passed = score >= self.spec.pass_at
        return Grade(grader=self.id, score=score, passed=passed, detail=detail or None)

    async def _call(self, subject: GradeInput) -> object:
        """Call the check; a `SystemExit` of its own is a `GraderError`, here.

        Here, not in `grade`: this runs in `wait_for`'s task, and a `SystemExit` that leaves a
        task stops the event loop, whoever awaits it (a grader's `sys.exit()` ended the process,
        a worker included, with its store left open).
        """
        try:
            value = self.check(subject)
            if inspect.isawaitable(value):
                value = await value
        except Exception:
            raise
        except BaseException as exc:
            if isinstance(exc, _NOT_THE_GRADERS):
                raise
            raise GraderError(f"{type(exc).__name__}: {exc}") from exc
        return value

    def _error(self, message: str) -> Grade:
        return Grade(grader=self.id, score=None, passed=False, error=message)


_NOT_THE_GRADERS = (KeyboardInterrupt, asyncio.CancelledError, GeneratorExit)
"""Raised through a grader, never its grade's error: Ctrl-C and cancellation."""


def _score(value: object) -> tuple[float, str]:
    detail = ""
    if isinstance(value, Verdict):
        detail = value.detail
        value = value.score
    if isinstance(value, bool):
        return (1.0 if value else 0.0), detail
    if isinstance(value, int | float):
        score = float(value)
        if not math.isfinite(score) or not 0.0 <= score <= 1.0:
            raise GraderError(f"score {value!r} is outside 0..1")
        return score, detail
    raise GraderError(f"returned {type(value).__name__}; return a bool, a float 0..1 or a Verdict")


def build_graders(spec: Spec, plans: Plans) -> tuple[Grader, ...]:
    """Build every grader of `evals.online`; a bad parameter is a `SpecError` at its line."""
    from pytest_harness.evals.judge import build_judge
    from pytest_harness.plugins import registry

    graders = []
    for i, grader in enumerate(spec.document.evals.online.graders):
        where: KeyPath = ("evals", "online", "graders", i)
        if grader.check == "model":
            check, _ = build_judge(grader, plans)
            graders.append(Grader(spec=grader, check=check, plans=plans))
            continue
        factory = cast(GraderFactory, registry("harness_graders").get(grader.check))
        graders.append(Grader(spec=grader, check=factory(grader, spec, where)))
    return tuple(graders)


async def grade_all(
    graders: Sequence[Grader],
    result: RunResult,
    input: str,
    principal: Mapping[str, Any] | None = None,
) -> list[Grade]:
    """Every applicable grader's grade of one outcome, graded concurrently, in spec order."""
    chosen = [g for g in graders if g.applies(result.task)]
    return list(await asyncio.gather(*(g.grade(result, input, principal) for g in chosen)))


class OnlineEvals:
    """Grades a sampled share of the runs a harness ends, in the background."""

    def __init__(self, spec: Spec, plans: Plans, store: Store) -> None:
        self.share = spec.document.evals.online.sample
        self.graders = build_graders(spec, plans)
        self.store = store
        self._pending: set[asyncio.Task[None]] = set()

    def ended(self, result: RunResult) -> None:
        """Start grading `result` if its run is sampled; return at once, never raise."""
        try:
            if not self.wants(result.task, result.run_id):
                return
            job = asyncio.get_running_loop().create_task(self._grade(result))
        except Exception:  # pragma: no cover - nothing above raises on a valid result
            log.exception("online evals: cannot schedule the grading of run %s", result.run_id)
            return
        self._pending.add(job)
        job.add_done_callback(self._pending.discard)

    async def flush(self) -> None:
        """Wait until every grade started so far is stored (or has failed)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    def wants(self, task: str, run_id: str) -> bool:
        """Whether the run `run_id` of `task` is graded: it is sampled and a grader applies."""
        return any(g.applies(task) for g in self.graders) and sampled(run_id, self.share)

    async def _grade(self, result: RunResult) -> None:
        try:
            record = await self.store.get_run(result.run_id)
            await self.grade(result, record.input, record.principal)
        except Exception:
            log.exception("online evals: the samples of run %s were not stored", result.run_id)

    async def grade(
        self, result: RunResult, input: str, principal: Mapping[str, Any] | None = None
    ) -> list[Sample]:
        """Grade an ended run now with every grader that applies, and store the samples.

        What `ended` does in the background, for a run whose record is not in the store (a run
        on Temporal: its worker grades it when its workflow ends). A grader's failure is its
        sample's `error`; a store that cannot write raises. The store keeps one sample per run
        and grader, so grading a run again never counts it twice.
        """
        grades = await grade_all(self.graders, result, input, principal)
        now = time.time()
        samples = [
            Sample(
                run_id=result.run_id,
                task=result.task,
                grader=g.grader,
                score=g.score,
                passed=g.passed,
                detail=_nul_escaped(g.detail),
                error=_nul_escaped(g.error),
                created_at=now,
            )
            for g in grades
        ]
        await self.store.add_samples(samples)
        return samples


def _nul_escaped(text: str | None) -> str | None:
    r"""A sample's `detail` or `error` with each NUL written `\x00`, as on every store.

    Both are text columns, and PostgreSQL text holds no NUL: a grader whose message quotes
    one (a run output with a NUL, an exception's text) would lose its sample there.
    """
    if text is None or "\x00" not in text:
        return text
    return text.replace("\x00", "\\x00")
