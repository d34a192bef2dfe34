"""The specs this worker process hosts, by digest: where the `HarnessRun` workflow finds its plan.

A `Worker` registers its loaded spec here (`host`) before it polls: under its own digest and
under every digest it accepts. The workflow runs the run loop itself, so it reads the task's
plan from this registry (a module passed through the workflow sandbox, built once per process,
never changed by a workflow) by the spec digest its run was started with. A digest that is not
hosted ends the run `failed` with `NotHosted`'s kind and words, naming both digests.

It also holds the process's hook thread (`tell_later`): the `harness_checkpoint` hooks of the
runs this worker drives are told there, in order, so a workflow task never waits for a hook.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pytest_harness.runtime.plan import Plans, TaskPlan

__all__ = ["NotHosted", "host", "plan_for", "tell_later"]

_hooks: ThreadPoolExecutor | None = None
_hooks_lock = threading.Lock()


def tell_later(notify: Callable[[], None]) -> None:
    """Run `notify` (it tells the checkpoint hooks, logging their errors) on the hook thread.

    One thread, so the hooks hear of a run's boundaries in order; the caller (a workflow task,
    held to Temporal's deadlock timeout) never waits for a slow hook.
    """
    global _hooks
    with _hooks_lock:
        if _hooks is None:
            _hooks = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-hooks")
    _hooks.submit(notify)


class NotHosted(Exception):
    """The run's spec digest or task is not hosted here; `kind` is the failure's type."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Hosted:
    def __init__(self, name: str, digest: str, path: str, plans: Plans) -> None:
        self.name = name
        self.digest = digest
        self.path = path
        self.plans = plans


_HOSTED: dict[str, _Hosted] = {}


def host(plans: Plans, *, name: str, digest: str, path: str, accept: Iterable[str] = ()) -> None:
    """Host the spec of `plans` (`name@digest`, loaded from `path`) and the digests it accepts."""
    hosted = _Hosted(name, digest, path, plans)
    for each in (digest, *accept):
        _HOSTED[each] = hosted


def plan_for(conf: Mapping[str, Any], task: str) -> TaskPlan:
    """The plan of `task` for a run started with `conf` (its `spec_digest`); else `NotHosted`."""
    wanted = str(conf.get("spec_digest") or "")
    hosted = _HOSTED.get(wanted)
    if hosted is None:
        here = sorted({(h.name, h.digest, h.path) for h in _HOSTED.values()})
        name = here[0][0] if here else "?"
        hosts = ", ".join(f"{n}@{d} ({p})" for n, d, p in here) or "no spec"
        raise NotHosted(
            "SpecDigestMismatch",
            f"this run was started for spec {name}@{wanted}, but the worker hosts {hosts}; "
            f"start a worker on that spec, or this one with --accept {wanted}",
        )
    if task not in hosted.plans.tasks:
        raise NotHosted("UnknownTask", f"the worker's spec {hosted.path} has no task {task!r}")
    return hosted.plans.tasks[task]
