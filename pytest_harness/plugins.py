"""The plugin manager: hook specs, entry points, and the built-ins registered like any plugin.

pluggy, the hook specs and logging are imported when the manager is first made (a run's first
store or model), not with this module: the `ph.load` path imports it and never needs them.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

from pytest_harness.errors import HarnessError

if TYPE_CHECKING:
    import pluggy

__all__ = ["Registry", "checkpoint_hooked", "notify_checkpoint", "plugin_manager", "registry"]

T = TypeVar("T")
BUILTINS = "pytest_harness.builtins"
"""The built-in plugin's module, named as its `pytest_harness` entry point names it."""


@functools.cache
def plugin_manager() -> pluggy.PluginManager:
    """The process's plugin manager, with entry-point plugins and the built-ins loaded."""
    import pluggy

    from pytest_harness import hookspecs

    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.load_setuptools_entrypoints(hookspecs.PROJECT)
    # by name, as the entry point names it: the built-ins sit above every layer they wire in
    # (providers, stores, checks, reports), so this module (below them all) never imports them
    builtins = importlib.import_module(BUILTINS)
    if not pm.is_registered(builtins):  # running from a source tree without entry points
        pm.register(builtins, name="builtins")
    pm.check_pending()
    return pm


class Registry:
    """Names offered by plugins for one hook, merged; a name claimed twice is an error."""

    def __init__(self, what: str, results: Iterable[Mapping[str, T]]) -> None:
        self.what = what
        self._items: dict[str, object] = {}
        for mapping in results:
            for name, factory in mapping.items():
                if name in self._items and self._items[name] is not factory:
                    raise HarnessError(f"two plugins provide the {what} {name!r}")
                self._items[name] = factory

    def get(self, name: str) -> object | None:
        """The factory registered under `name`, if any."""
        return self._items.get(name)

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._items)


@functools.cache
def registry(hook: str) -> Registry:
    """The merged results of one collecting hook (`harness_stores`, …)."""
    caller = getattr(plugin_manager().hook, hook)
    return Registry(hook.removeprefix("harness_").replace("_", " ").rstrip("s"), caller())


@functools.cache
def _checkpoint_hook() -> pluggy.HookCaller:
    return plugin_manager().hook.harness_checkpoint


def checkpoint_hooked() -> bool:
    """Whether any plugin implements `harness_checkpoint` now (so a boundary is worth telling)."""
    return bool(_checkpoint_hook().get_hookimpls())


def notify_checkpoint(*, session_id: str, run_id: str, status: str, phase: str) -> None:
    """Call every `harness_checkpoint` hook after a committed boundary, each on its own.

    A hook that raises is logged with its plugin's name and does not stop the others; nothing
    it does can change the run, which has already committed. With no hook nothing is built.
    """
    impls = _checkpoint_hook().get_hookimpls()
    if not impls:
        return
    given = {"session_id": session_id, "run_id": run_id, "status": status, "phase": phase}
    for impl in reversed(impls):  # pluggy's own calling order
        try:  # an implementation may take only some of the arguments, as in any pluggy call
            impl.function(**{name: given[name] for name in impl.argnames})
        except Exception:
            import logging

            logging.getLogger(__name__).exception(
                "harness_checkpoint hook of plugin %r raised at %s of run %s (status %s); "
                "the run goes on",
                impl.plugin_name,
                phase,
                run_id,
                status,
            )
