"""The text a caller gives `Harness`, settled before any store sees it: ids and values to write.

No store can keep text with a lone surrogate (what bytes decoded with `surrogateescape`
leave): it is no UTF-8, and sqlite and Postgres refuse it while binding a parameter. Nor can
PostgreSQL keep a NUL in a text column. So the public methods settle such text themselves,
the same on every store (DESIGN §11):

- an id to look up (a run id, a filter of `runs()` or `samples()`) names nothing, since
  nothing stored can hold it: `known_run` raises `UnknownRun`, `storable` tells a filter that
  matches no row;
- a value to write as a column (a session id, a tenant, an idempotency key, a label, a
  principal, the input, a reason, a resolver) is refused by `check_text` with `StoreError`
  naming the argument and showing the value escaped, before anything is written; a
  resolution's result (`check_result`) only for a lone surrogate: it is kept as JSON, where a
  NUL is escaped, as in a tool's result.

Every check is `str.isascii()` and a search for NUL first: an ASCII id costs a C call or two.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_harness.errors import StoreError, UnknownRun
from pytest_harness.principal import Principal
from pytest_harness.store.helpers import json_fault, utf8_error

__all__ = [
    "check_principal",
    "check_result",
    "check_start",
    "check_text",
    "known_run",
    "storable",
]


def storable(value: object) -> bool:
    """Whether a store could hold `value` as text.

    False for a string with a lone surrogate or a NUL: what `check_text` refuses to write,
    so no row holds it.
    """
    if not isinstance(value, str):
        return True
    if "\x00" in value:
        return False
    return value.isascii() or utf8_error(value) is None


def known_run(run_id: str) -> None:
    """`UnknownRun` for a run id no store can hold (so no run has it); else nothing.

    No run id the harness makes (`run_` and hex digits) has a NUL or a surrogate, on any store.
    """
    if not storable(run_id):
        raise UnknownRun(run_id)


def check_text(value: object, name: str) -> None:
    """Refuse a string to be written that is no UTF-8 or holds a NUL (`StoreError` naming `name`).

    The arguments checked here are kept as text columns, and PostgreSQL text holds no NUL
    (memory and sqlite would keep it): refused on every store alike. Anything else (None,
    valid text without a NUL, a value of another type) passes: the other checks of the
    argument are its method's. A NUL inside a value the run produces (a tool result, a
    model answer) is kept: it is stored as JSON, escaped.
    """
    if not isinstance(value, str):
        return
    at = value.find("\x00")
    if at >= 0:
        raise StoreError(
            f"{name} {_shown(value, at)} holds a NUL character (at character {at}), which "
            "PostgreSQL text cannot keep; nothing was written; remove it "
            "(text.replace('\\x00', ''))"
        )
    if value.isascii():
        return
    bad = utf8_error(value)
    if bad is None:
        return
    raise StoreError(
        f"{name} {_shown(value, bad.start)} is not valid UTF-8 text (a lone surrogate at "
        f"character {bad.start}); nothing was written; pass text decoded as UTF-8 "
        "(bytes.decode('utf-8', 'replace'))"
    )


def check_principal(who: Principal, name: str) -> None:
    """Refuse a principal whose id, a role or tenant is no UTF-8 (see `check_text`)."""
    check_text(who.id, f"{name} id")
    for role in who.roles:
        check_text(role, f"{name} role")
    check_text(who.tenant, f"{name} tenant")


def check_start(
    input: str,
    who: Principal,
    tenant: str | None,
    session_id: str | None,
    idempotency_key: str | None,
    labels: Mapping[str, str],
) -> None:
    """Refuse what a new run would write that is no UTF-8 (see `check_text`), naming it."""
    if _all_ascii(
        input, who.id, who.tenant, tenant, session_id, idempotency_key, *who.roles, *labels.items()
    ):
        return  # the usual case: nothing to name
    check_text(input, "input")
    check_principal(who, "principal")
    check_text(tenant, "tenant")
    check_text(session_id, "session_id")
    check_text(idempotency_key, "idempotency_key")
    for key, value in labels.items():
        check_text(key, "a label key")
        check_text(value, f"labels[{key!r}]")


def _all_ascii(*values: object) -> bool:
    """Whether each value is None or ASCII text without a NUL (a `(key, value)` pair: both)."""
    for value in values:
        if value is None:
            continue
        if type(value) is tuple:
            if not _all_ascii(*value):
                return False
        elif type(value) is not str or not value.isascii() or "\x00" in value:
            return False
    return True


def check_result(result: Any, run_id: str, execution_key: str) -> None:
    """Refuse a `resolve(result=...)` the store cannot keep (`StoreError`), naming the place.

    The value is checked as the call's outcome keeps it (an integer too long for decimal text
    is kept as its hex string, an object as its JSON form): text with a lone surrogate in it
    is refused before the run is read, not when its commit fails.
    """
    from pytest_harness.tools.outcome import ToolOutcome

    outcome = ToolOutcome.resolved(result)
    if utf8_error(outcome.text) is None:
        return
    fault = json_fault(outcome.value, "result") or "result: text with a lone surrogate"
    raise StoreError(
        f"cannot resolve {execution_key!r} of run {run_id} with this result: {fault}; "
        "nothing was written; pass text decoded as UTF-8 (bytes.decode('utf-8', 'replace'))"
    )


_SHOWN = 60
"""Longer values are shown as the characters around the surrogate."""


def _shown(value: str, at: int) -> str:
    """`value` escaped (ASCII), or the part of it around character `at` when it is long."""
    if len(value) <= _SHOWN:
        return ascii(value)
    start, end = max(0, at - 20), min(len(value), at + 20)
    return (
        ("..." if start else "")
        + ascii(value[start:end])
        + ("..." if end < len(value) else "")
        + f" ({len(value)} characters)"
    )
