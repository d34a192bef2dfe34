"""Random ids for runs, sessions, attempts and journal entries: version-4 UUIDs, made quickly.

`uuid.uuid4()` builds a `UUID` object to print it; a recorded run takes some thirty ids, so
these format the same 122 random bits (from `os.urandom`, with the version and variant bits
set as RFC 4122 says) straight into the text `uuid4().hex` and `str(uuid4())` give.
"""

from __future__ import annotations

import os

__all__ = ["uuid4_hex", "uuid4_text"]

_VARIANT = "89ab89ab89ab89ab"
"""The variant nibble (`10xx`) for each value of a random nibble, by its low two bits."""


def uuid4_hex() -> str:
    """A random version-4 UUID as 32 hex digits, like `uuid.uuid4().hex`."""
    digits = os.urandom(16).hex()
    return f"{digits[:12]}4{digits[13:16]}{_VARIANT[int(digits[16], 16)]}{digits[17:]}"


def uuid4_text() -> str:
    """A random version-4 UUID in its 8-4-4-4-12 form, like `str(uuid.uuid4())`."""
    h = uuid4_hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
