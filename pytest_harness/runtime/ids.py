"""Random ids for runs, sessions, attempts and journal entries: version-4 UUIDs, made quickly.

`uuid.uuid4()` builds a `UUID` object to print it; a recorded run takes some thirty ids, so
these format the same 122 random bits (from `os.urandom`, drawn for many ids at once, with the
version and variant bits set as RFC 4122 says) straight into the text `uuid4().hex` and
`str(uuid4())` give.

A journal entry's id only has to be unique (a retried write keeps it, and the store skips an id
it holds): `unique_text` gives one in the same form without a system call per id, a random
version-4 UUID drawn once per process (again in a forked child) whose last 48 bits count on.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

__all__ = ["unique_text", "uuid4_hex", "uuid4_text"]

_VARIANT = "89ab89ab89ab89ab"
"""The variant nibble (`10xx`) for each value of a random nibble, by its low two bits."""


_POOL = 64
"""How many ids one `os.urandom` call draws the bits of."""

_pool: Iterator[str] = iter(())
"""The random ids drawn and not yet given (a list's iterator: a thread's `next` is atomic)."""


def _fill() -> str:
    """Draw the bits of `_POOL` ids at once: the first one, the others left in `_pool`."""
    global _pool
    digits = os.urandom(16 * _POOL).hex()
    drawn = [
        f"{digits[i : i + 12]}4{digits[i + 13 : i + 16]}"
        f"{_VARIANT[int(digits[i + 16], 16)]}{digits[i + 17 : i + 32]}"
        for i in range(0, 32 * _POOL, 32)
    ]
    _pool = iter(drawn[1:])
    return drawn[0]


def uuid4_hex() -> str:
    """A random version-4 UUID as 32 hex digits, like `uuid.uuid4().hex`.

    Its 122 random bits come from a pool drawn `_POOL` ids at a time (one system call, not
    one per id); a forked child draws its own.
    """
    return next(_pool, None) or _fill()


def uuid4_text() -> str:
    """A random version-4 UUID in its 8-4-4-4-12 form, like `str(uuid.uuid4())`."""
    h = uuid4_hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_COUNTED = 1 << 48
"""The last 12 hex digits (48 bits) of a `unique_text` id count; the first 74 random bits stay."""

_drawn: tuple[str, itertools.count[int]] = ("", itertools.count(_COUNTED))
"""The prefix and its counter, replaced together (a thread never pairs one with another's)."""


def _draw() -> None:
    """Draw a new random prefix and a random start for its counter."""
    global _drawn
    h = uuid4_hex()
    _drawn = (f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-", itertools.count(int(h[20:], 16)))


def unique_text() -> str:
    """A unique id in the form of `str(uuid.uuid4())`: this process's random prefix, a count.

    Two processes share no prefix but with a chance of 2**-74; a forked child draws its own.
    """
    prefix, counter = _drawn
    n = next(counter)
    if n >= _COUNTED:  # the first call, or 2**48 ids since the last draw
        _draw()
        prefix, counter = _drawn
        n = next(counter)
    return f"{prefix}{n:012x}"


def _forked() -> None:
    """In a forked child: a new prefix for `unique_text`, no random id of the parent's pool."""
    global _pool
    _pool = iter(())
    _draw()


if hasattr(os, "register_at_fork"):  # POSIX: a forked child never reuses its parent's ids
    os.register_at_fork(after_in_child=_forked)
