"""The keys of a run's tool calls and of their approval requests, and what binds an answer.

Pure functions of the run's data, kept apart from the run loop (`runtime.approvals`) so the
checks on answers (`runtime.approval_checks`) and a harness that only reads results import no
part of the loop.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["approval_id", "args_digest", "execution_key"]


def execution_key(run_id: str, step: int, index: int) -> str:
    """The stable key of call `index` of model step `step` in a run."""
    digest = hashlib.blake2b(f"{run_id}:{step}:{index}".encode(), digest_size=16).hexdigest()
    return f"exk_{digest}"


def approval_id(key: str, rule_id: str, *, first: bool) -> str:
    """The id of the approval request of call `key` for rule `rule_id`.

    The first request of a call takes the call's own digest, so a call that needs one approval
    keeps the id it always had; each further one is told apart by its rule.
    """
    if first:
        return "apr_" + key.removeprefix("exk_")
    digest = hashlib.blake2b(f"{key}:{rule_id}".encode(), digest_size=16).hexdigest()
    return f"apr_{digest}"


def args_digest(args: Mapping[str, Any]) -> str:
    """A digest of tool arguments in canonical JSON, binding an approval to what was asked."""
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()
