"""Whether live model providers may be called, and the stand-in for ones not installed.

Live providers call out of the process (and spend money). A normal process may call them; the
pytest plugin blocks them unless `--harness-allow-live` is given, and `HARNESS_ALLOW_LIVE=0`
blocks them anywhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from pytest_harness.errors import HarnessError
from pytest_harness.hookspecs import ProviderConfig
from pytest_harness.models.base import ModelRequest, ModelResponse

__all__ = ["UninstalledLiveProvider", "allow_live_models", "live_models_allowed"]

_allowed: bool | None = None


def live_models_allowed() -> bool:
    """Whether a live provider may be called now."""
    if _allowed is not None:
        return _allowed
    return os.environ.get("HARNESS_ALLOW_LIVE", "1").strip().lower() not in ("0", "false", "no")


@contextmanager
def allow_live_models(allowed: bool = True) -> Iterator[None]:
    """Allow (or block, with `False`) live model calls inside the `with` block."""
    global _allowed
    previous = _allowed
    _allowed = allowed
    try:
        yield
    finally:
        _allowed = previous


class UninstalledLiveProvider:
    """A live provider named by a spec whose plugin is not installed in this environment.

    The spec loads (so an offline environment overlay can replace the model); calling it says
    what is missing.
    """

    live = True

    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.model.use
        self.model_name = config.name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Refuse: no implementation of this provider is installed."""
        raise HarnessError(
            f"model {self.model_name!r} uses provider {self.name!r}, which is not installed in "
            "this environment; install a plugin that provides it, or choose an environment "
            "with a scripted model (-e offline)"
        )

    def retry_delay(self, attempt: int) -> float:
        """No retries are worth waiting for."""
        return 0.0
