"""`load()`: a `harness.yaml` made into a `Harness`, the composition root of the package.

It sits above every layer it wires together: the spec, the tools, a store from the plugins,
the online evals, and the execution (the built-in loop, or Temporal's `TemporalHarness`, a
`Harness` subclass imported only when the spec asks for it). Nothing below imports it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, cast

from pytest_harness.plugins import registry
from pytest_harness.runtime.harness import Harness
from pytest_harness.runtime.harness_base import EndedRuns
from pytest_harness.runtime.plan import Plans
from pytest_harness.spec.spec import Spec
from pytest_harness.store.base import Store

if TYPE_CHECKING:
    from pytest_harness.hookspecs import StoreFactory

__all__ = ["load"]


def load(
    path: str | os.PathLike[str],
    *,
    env: str | None = None,
    store: Store | str | None = None,
    record: bool | None = None,
) -> Harness:
    """Load `harness.yaml` and return a `Harness` (use it as `async with`, or `await aclose()`).

    `env` picks an environment overlay (default: `$HARNESS_ENV`, else none). `store` replaces
    the spec's `state.use`: a store name (`"memory"`, `"sqlite"`) or a `Store` instance.
    `record` overrides `state.record` (an org baseline may lock it).
    """
    from pytest_harness.spec.loader import load_spec
    from pytest_harness.tools.registry import ToolSet

    spec = load_spec(Path(path), env=env, record=record)
    plans = Plans(spec, ToolSet.from_spec(spec))
    made = _make_store(spec, store)
    evals: EndedRuns | None = None
    if spec.document.evals.online.graders:
        from pytest_harness.evals.online import OnlineEvals

        evals = OnlineEvals(spec, plans, made)
    if spec.document.execution.use == "temporal":
        return _temporal(spec, plans, made, evals, record)
    return Harness(spec, plans, made, evals=evals, record=record)


def _temporal(
    spec: Spec, plans: Plans, store: Store, evals: EndedRuns | None, record: bool | None
) -> Harness:
    """The seam to Temporal execution (DESIGN §14): imported only when the spec asks for it."""
    from pytest_harness.errors import ExecutionError

    try:
        from pytest_harness.temporal.client import TemporalHarness
    except ImportError as exc:
        raise ExecutionError(
            f"{spec.path} execution.use: temporal needs the Temporal SDK: "
            f"pip install 'pytest-harness[temporal]' ({exc})"
        ) from None
    return TemporalHarness(spec, plans, store, evals=evals, record=record)


def _make_store(spec: Spec, store: Store | str | None) -> Store:
    if store is not None and not isinstance(store, str):
        return store
    state = spec.document.state
    name = store or state.use
    factory = registry("harness_stores").get(name)
    if factory is None:
        from pytest_harness.errors import did_you_mean

        known = registry("harness_stores").names()
        raise spec.error(f"unknown store {name!r}{did_you_mean(name, known)}", ("state", "use"))
    return cast("StoreFactory", factory)(state, spec)
