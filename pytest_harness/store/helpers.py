"""What every store implementation shares: the JSON encoding, cursors, errors and checks.

Each helper states one rule of the store contract (`store/base.py`) in code, so the memory,
sqlite and Postgres stores (and a plugin's) encode, parse and refuse alike. Import them from
`pytest_harness.store.base`, which re-exports them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pytest_harness.errors import ResolutionError, StoreError
from pytest_harness.jsonfast import encoder

if TYPE_CHECKING:
    from pytest_harness.store.base import Sample, StoredArtifact

__all__ = [
    "CONTROLS",
    "Control",
    "PreparedJSON",
    "already_answered",
    "artifact_sha256",
    "check_control",
    "check_decision",
    "check_limit",
    "check_samples",
    "encode_json",
    "json_fault",
    "json_text",
    "parse_cursor",
    "stale_token",
    "utf8_error",
]

Control = Literal["pause", "cancel"]
CONTROLS: tuple[Control, ...] = ("pause", "cancel")
"""The control requests a run can carry; a pending `cancel` is never replaced by a `pause`."""


def _json_default(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_encode: Callable[[object], str] = encoder(
    ensure_ascii=False,
    allow_nan=False,
    default=_json_default,  # a cycle ends in RecursionError, as deep nesting does: both caught
)
json_text = _encode
"""The store's encoding (compact, text as it is, no NaN), with its errors (`TypeError`,
`ValueError`, `RecursionError`): for the parts of a `PreparedJSON`."""


class PreparedJSON(dict[str, Any]):
    """A JSON object whose maker builds its text faster than encoding it whole would.

    `encode_json` takes its text from `text()`, which must give exactly what encoding the
    mapping gives (for example from parts encoded for an earlier commit that have not changed
    since), and raise what encoding it raises; to anything else it is a plain `dict`.
    """

    __slots__ = ("_text",)

    def __init__(self, value: Mapping[str, Any], text: Callable[[], str]) -> None:
        super().__init__(value)
        self._text = text

    def text(self) -> str:
        """The mapping's JSON text, as `encode_json` would write it."""
        return self._text()


def utf8_error(text: str) -> UnicodeEncodeError | None:
    """Why `text` cannot be written as UTF-8, or None when it can.

    What cannot is a lone surrogate, as bytes decoded with `surrogateescape` leave.
    """
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc
    return None


def encode_json(value: object, what: str) -> str:
    """Encode `value` as compact JSON text, the one encoding every store writes.

    Any `Mapping` is written as an object and a tuple as an array. A value JSON cannot hold
    (circular or nested too deep included, or a string with a lone surrogate, which is no
    UTF-8) is a `StoreError` naming `what` (for example
    `"the state of run run_…"`).
    """
    try:
        text = value.text() if type(value) is PreparedJSON else _encode(value)
        if (not_utf8 := utf8_error(text)) is not None:
            raise not_utf8  # a lone surrogate: no store can keep it as UTF-8
        return text
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise StoreError(
            f"cannot store {what}: {exc}; keep it to JSON values (objects, arrays, strings, "
            "finite numbers, booleans and null); nothing was written"
        ) from exc
    except RecursionError:
        raise StoreError(
            f"cannot store {what}: it is circular or nested too deep for JSON; keep it to "
            "JSON values (objects, arrays, strings, finite numbers, booleans and null); "
            "nothing was written"
        ) from None


def json_fault(value: object, where: str) -> str | None:
    """Why `value` is no JSON the store can keep, naming the place under `where`; None if it is.

    What the store's encoding (`encode_json`) refuses: a float that is not finite, an integer
    too long for decimal text (`sys.get_int_max_str_digits`), text with a lone surrogate (no
    UTF-8), a key or an object JSON has no form for, nesting too deep or circular. The value is
    encoded once; only a value that fails is walked, to say where. The description is ASCII
    (a bad value is shown escaped), so that it can itself be stored.
    """
    try:
        text = _encode(value)
    except (TypeError, ValueError, RecursionError):
        pass
    else:
        if utf8_error(text) is None:
            return None
    return _fault(value, where, 0) or f"{where}: not a JSON value"


_FAULT_DEPTH = 200
"""How deep `_fault` walks before it calls the value nested too deep (or circular)."""


def _fault(value: object, where: str, depth: int) -> str | None:
    """The first place in `value` the store's encoding refuses, described (see `json_fault`)."""
    if depth > _FAULT_DEPTH:
        shown = where if len(where) <= 80 else where[:77] + "..."
        return f"{shown}: nested too deep for JSON (or circular)"
    if isinstance(value, str):
        bad = utf8_error(value)
        if bad is None:
            return None
        shown = ascii(value[max(0, bad.start - 20) : bad.end + 20])
        return f"{where}: text with a lone surrogate, no UTF-8 ({shown})"
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        try:
            str(value)
        except ValueError:
            return f"{where}: an integer of {value.bit_length()} bits, too long for decimal text"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where}: {value!r}, not a finite number"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str | int | float | bool) and key is not None:
                return f"{where}: a key of type {type(key).__name__} ({_shown(key)})"
            place = (
                f"{where}.{key}"
                if isinstance(key, str) and key.isidentifier()
                else f"{where}[{key!a}]"
            )
            found = _fault(key, f"{where} key", depth + 1) or _fault(item, place, depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _fault(item, f"{where}[{index}]", depth + 1)
            if found is not None:
                return found
        return None
    return f"{where}: a value of type {type(value).__name__} ({_shown(value)}), not JSON"


def _shown(value: object) -> str:
    """A short ASCII repr of `value` for a message."""
    try:
        shown = ascii(value)
    except Exception:  # a repr that raises
        return f"<{type(value).__name__}>"
    return shown if len(shown) <= 60 else shown[:57] + "..."


def parse_cursor(after: str) -> int:
    """Return the integer in an event cursor; `ValueError` naming it when it is not one."""
    if isinstance(after, str) and after.isascii() and after.isdigit():
        return int(after)
    raise ValueError(
        f"malformed event cursor {after!r}: a cursor is the decimal string of an event's "
        'position, as in Event.cursor; pass "0" to read from the start'
    )


def stale_token(run_id: str, token: int, current: int, owner: str | None) -> StoreError:
    """Build the error for a write fenced by a token that is no longer the current one."""
    holder = f"by owner {owner!r}" if owner is not None else "by no owner (lease released)"
    return StoreError(
        f"stale fencing token (this worker lost the lease): run {run_id} is now held with "
        f"token {current} {holder}; "
        f"this worker's token {token} was superseded; nothing was written",
        stale=True,
    )


def already_answered(
    run_id: str, approval_id: str, status: str, approver: str | None
) -> ResolutionError:
    """Build the error for a second answer to an approval, naming who answered first."""
    return ResolutionError(
        f"approval {approval_id} of run {run_id} was already answered: {status} by {approver}"
    )


def check_samples(samples: Sequence[Sample]) -> None:
    """Raise `StoreError` (nothing written) for a sample whose score no store can keep."""
    import math

    for sample in samples:
        score = sample.score
        number = isinstance(score, int | float) and not isinstance(score, bool)
        if score is not None and not (number and math.isfinite(score)):
            raise StoreError(
                f"cannot store the sample of grader {sample.grader!r} for run {sample.run_id}: "
                f"its score must be a finite number or None, got {score!r}; nothing was written"
            )


def check_limit(limit: int | None) -> None:
    """Raise `ValueError` for a negative `limit`."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be zero or more, got {limit}")


def artifact_sha256(artifact: StoredArtifact) -> str:
    """Return the artifact's hash when it matches its bytes, else raise `StoreError`."""
    import hashlib

    actual = hashlib.sha256(artifact.data).hexdigest()
    if artifact.sha256 != actual:
        raise StoreError(
            f"cannot store artifact {artifact.sha256!r}: its bytes hash to {actual}; "
            "nothing was written"
        )
    return actual


def check_control(control: str) -> str:
    """Return `control` when it is `pause` or `cancel`, else raise `ValueError`."""
    if control not in CONTROLS:
        raise ValueError(f"control must be 'pause' or 'cancel', got {control!r}")
    return control


def check_decision(decision: str) -> str:
    """Return `decision` when it is `approve` or `decline`, else raise `ValueError`."""
    if decision not in ("approve", "decline"):
        raise ValueError(f"decision must be 'approve' or 'decline', got {decision!r}")
    return decision
