"""Whether live model providers may be called.

Live providers (`openai`, `anthropic`, plugins' providers with `live = True`) call out of the
process and spend money. A normal process may call them; the pytest plugin blocks them unless
`--harness-allow-live` is given, and `HARNESS_ALLOW_LIVE=0` blocks them anywhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["allow_live_models", "live_models_allowed", "set_live_models_allowed"]

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


def set_live_models_allowed(allowed: bool | None) -> bool | None:
    """Allow (`True`) or block (`False`) live model calls until changed; return the previous value.

    `None` defers to `HARNESS_ALLOW_LIVE` again. The pytest plugin sets it for a whole session.
    """
    global _allowed
    previous = _allowed
    _allowed = allowed
    return previous
