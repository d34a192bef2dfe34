"""What leaves the store: credentials redacted, generated ids made stable (DESIGN §6).

Two passes make a value safe to leave the store (golden files, exports, reports, CLI output):

- **Keys.** A mapping key that names a credential has its value replaced by `[REDACTED]`, at
  any depth, also inside strings that hold JSON. Keys are read as words in any casing or mix:
  `password`, `client_secret`, `clientSecret`, `X-Api-Key`, `ACCESS_TOKEN`, `refreshToken`,
  `secretKey`, `sessionToken`, `authToken`, `x-api-key` ([`is_credential_key`][]).
- **Free text.** Every string is scanned for well-known secret shapes ([`SECRET_PATTERNS`][]:
  `Authorization: Bearer …`, `sk-…` and `sk-ant-…` keys, `ghp_…` tokens, AWS access key ids,
  `scheme://user:password@host` (the user may be empty, as in `redis://:password@host`),
  `password=…` pairs, `"token": "…"` inside text, JWTs,
  private key blocks, …). The secret is replaced and its label kept
  (`Authorization: Bearer [REDACTED]`, `postgresql://app:[REDACTED]@db`, `sk-ant-[REDACTED]`).
  A plugin adds shapes through the `harness_redaction_patterns` hook ([`SecretPattern`][]).

The catalogue is our own, modelled on the regex detectors of `detect-secrets` plus the shapes
it lacks (Bearer headers, `sk-ant-`/`sk-proj-` keys, `github_pat_`, key-value pairs that keep
their key): `benchmarks/redaction.py` measured its scan of every string of a golden write
against `detect-secrets`' own scanner, which costs far more per string and replaces nothing.

Redaction is idempotent and deterministic (the same input gives the same output), so a
redacted recording still replays: a model answer and the tool call it recorded are redacted
alike, and a request digest is taken over redacted content on both sides.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "REDACTED",
    "SECRET_PATTERNS",
    "SecretPattern",
    "comparable",
    "holds_ids",
    "is_credential_key",
    "redact",
    "redact_schema",
    "redact_text",
    "stable_ids",
]

REDACTED = "[REDACTED]"


@dataclass(frozen=True, slots=True)
class SecretPattern:
    """A secret shape in free text: a name, and a regular expression that finds it.

    With a group named `secret`, only that group is replaced by `[REDACTED]` and the rest of
    the match (its label: `Bearer `, `sk-ant-`, `user:`) stays; without one, the whole match
    is replaced. A plugin returns these from its `harness_redaction_patterns` hook.
    """

    name: str
    pattern: str | re.Pattern[str]

    def compiled(self) -> re.Pattern[str]:
        """The pattern compiled; `ValueError` naming the shape when it does not compile."""
        if isinstance(self.pattern, re.Pattern):
            return self.pattern
        try:
            return re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(
                f"secret pattern {self.name!r} does not compile: {exc} ({self.pattern!r})"
            ) from exc


# -- keys ------------------------------------------------------------------------------------

_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
"""The words of a key in any casing: `clientSecret` → client, Secret; `APIKey` → API, Key."""
_CREDENTIAL_WORDS = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "secret",
        "token",
        "auth",
        "authorization",
        "credential",
        "credentials",
        "cookie",
        "bearer",
        "apikey",
        "privatekey",
        "secretkey",
        "accesskey",
    }
)
"""A key whose last word is one of these names a credential (`refresh_token`, `db-password`)."""
_KEY_QUALIFIERS = frozenset(
    {"api", "secret", "access", "private", "session", "signing", "encryption", "master", "auth"}
)
"""`…_key` names a credential after one of these (`api_key`, `secretKey`), not alone
(`execution_key`, `idempotency_key`, `sort_key` are not secrets)."""
_CREDENTIAL_SUFFIXES = ("password", "passwd", "secret", "token", "apikey")
"""A one-word key ending so (`accesstoken`, `dbpassword`) names a credential too."""


@functools.lru_cache(maxsize=4096)
def is_credential_key(key: str) -> bool:
    """Whether a mapping key names a credential, in any casing or mix of separators.

    `password`, `client_secret`, `clientSecret`, `X-Api-Key`, `ACCESS_TOKEN`, `secretKey`,
    `set-cookie`: yes. `max_tokens`, `execution_key`, `token_count`, `author`: no.
    """
    words = [w.lower() for w in _WORDS.findall(key)]
    if not words:
        return False
    last = words[-1]
    if last in _CREDENTIAL_WORDS:
        return True
    if last == "key":
        return len(words) > 1 and words[-2] in _KEY_QUALIFIERS
    return len(words) == 1 and last.endswith(_CREDENTIAL_SUFFIXES)


# -- free text -------------------------------------------------------------------------------

_KEY_IN_TEXT = (
    r"(?:[A-Za-z0-9]*[_\-.]?)?"
    r"(?:password|passwd|passphrase|secret|token|api[_\-]?key|access[_\-]?key|"
    r"private[_\-]?key|secret[_\-]?key|credentials?|session[_\-]?id|auth|cookie)"
)
"""A credential key as it appears in text (`password`, `clientSecret`, `x-api-key`, …)."""
_KEY_NEEDLES = ("pass", "secret", "token", "key", "credential", "session", "auth", "cookie")
"""Lower-case substrings one of which every `_KEY_IN_TEXT` match holds."""

SECRET_PATTERNS: tuple[SecretPattern, ...] = (
    SecretPattern(
        "private-key-block",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?P<secret>(?:[^-]|-(?!----))*+)"
        r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
    ),
    SecretPattern(
        "authorization-header",
        r"(?i)\b(?:proxy-)?authorization\\?[\"']?\s*[:=]\s*\\?[\"']?"
        r"(?:(?:bearer|basic|token|digest|negotiate|apikey)\s+)?(?P<secret>[^\s\"'\\,;]+)",
    ),
    SecretPattern("bearer-token", r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{8,}=*)"),
    SecretPattern("anthropic-key", r"\bsk-ant-(?:[a-z]+\d*-)?(?P<secret>[A-Za-z0-9_\-]{16,})"),
    SecretPattern(
        "openai-key", r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-)?(?P<secret>[A-Za-z0-9_\-]{16,})"
    ),
    SecretPattern("github-token", r"\b(?:gh[pousr]_|github_pat_)(?P<secret>[A-Za-z0-9_]{20,})"),
    SecretPattern("gitlab-token", r"\bgl(?:pat|dt|ft|soat|rt)-(?P<secret>[A-Za-z0-9_\-]{20,})"),
    SecretPattern(
        "aws-access-key-id", r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)(?P<secret>[A-Z0-9]{16})\b"
    ),
    SecretPattern("slack-token", r"\bxox[abposr]-(?P<secret>[A-Za-z0-9\-]{10,})"),
    SecretPattern("stripe-key", r"\b[rs]k_(?:live|test)_(?P<secret>[0-9a-zA-Z]{16,})"),
    SecretPattern("google-api-key", r"\bAIza(?P<secret>[0-9A-Za-z_\-]{35})"),
    SecretPattern("sendgrid-key", r"\bSG\.(?P<secret>[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43})"),
    SecretPattern("pypi-token", r"\bpypi-(?P<secret>AgE[A-Za-z0-9_\-]{50,})"),
    SecretPattern("npm-token", r"\bnpm_(?P<secret>[A-Za-z0-9]{36})"),
    SecretPattern(
        "jwt", r"\beyJ[A-Za-z0-9_\-]{5,}\.(?P<secret>eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*)"
    ),
    SecretPattern(
        "url-credentials",
        r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/?#@\"'<>]*:(?P<secret>[^\s@/?#\"'<>]+)@",
    ),
    SecretPattern(
        "quoted-key-value",
        rf"(?i)(?<![A-Za-z0-9])(?:\\?[\"'])?{_KEY_IN_TEXT}(?:\\?[\"'])?\s*[:=]\s*"
        r"(?P<q>\\?[\"'])(?P<secret>(?:(?!(?P=q)).)*)(?P=q)",
    ),
    SecretPattern(
        "key-value",
        rf"(?i)(?<![A-Za-z0-9])[\"']?{_KEY_IN_TEXT}[\"']?\s*[:=]\s*"
        r"(?P<secret>[^\s\"'\\,;&<>{}\[\]()]*[^\s\"'\\,;&<>{}\[\]().!?:])",
    ),
)
"""The built-in secret shapes, applied in this order (a private key block first, the generic
key-value pairs last, so a specific shape keeps its own label)."""


def _plugin_patterns() -> tuple[SecretPattern, ...]:
    """The shapes plugins add through `harness_redaction_patterns`, in registration order."""
    from pytest_harness.plugins import plugin_manager

    found: list[SecretPattern] = []
    for result in plugin_manager().hook.harness_redaction_patterns():
        for item in result or ():
            if isinstance(item, SecretPattern):
                found.append(item)
            elif isinstance(item, str | re.Pattern):
                found.append(SecretPattern("plugin", item))
            else:
                raise TypeError(
                    "harness_redaction_patterns must return SecretPattern objects or regular "
                    f"expressions, got {type(item).__name__}"
                )
    return tuple(found)


_NEEDLES: dict[str, tuple[str, ...]] = {
    "private-key-block": ("private key",),
    "authorization-header": ("authorization",),
    "bearer-token": ("bearer",),
    "anthropic-key": ("sk-ant-",),
    "openai-key": ("sk-",),
    "github-token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab-token": ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-"),
    "aws-access-key-id": ("a3t", "akia", "asia", "abia", "acca"),
    "slack-token": ("xox",),
    "stripe-key": ("_live_", "_test_"),
    "google-api-key": ("aiza",),
    "sendgrid-key": ("sg.",),
    "pypi-token": ("pypi-",),
    "npm-token": ("npm_",),
    "jwt": ("eyj",),
    "url-credentials": ("://",),
    "quoted-key-value": _KEY_NEEDLES,
    "key-value": _KEY_NEEDLES,
}
"""For each built-in shape, substrings one of which every match holds, in lower case: a text
that holds none of them cannot match, and is not scanned for that shape. A regular expression
tries a match at every position, so on a long tool result the generic key-value shapes cost
about half a microsecond a character; a substring search costs next to nothing. The text is
searched as `_folded` makes it, so what `(?i)` matches is found (Unicode has four letters that
it takes for ASCII ones)."""


@functools.cache
def _scanners() -> tuple[tuple[Callable[[str], str], tuple[str, ...]], ...]:
    """One substitution per shape (built-in, then plugins'), compiled once per process.

    Each comes with the substrings one of which a match needs (none for a plugin's shape: it
    always runs). A built-in shape is compiled when a text first holds one of its substrings:
    a replay whose texts hold none (most do) compiles none of the 19 (7 ms, #13).
    """
    built_in = tuple((_lazy(p), _NEEDLES[p.name]) for p in SECRET_PATTERNS)
    return built_in + tuple((_scanner(p.compiled()), ()) for p in _plugin_patterns())


def _lazy(shape: SecretPattern) -> Callable[[str], str]:
    """`_scanner` of `shape`, compiled on its first call."""
    compiled: list[Callable[[str], str]] = []

    def scan(text: str) -> str:
        if not compiled:
            compiled.append(_scanner(shape.compiled()))
        return compiled[0](text)

    return scan


def _scanner(pattern: re.Pattern[str]) -> Callable[[str], str]:
    if "secret" not in pattern.groupindex:
        return functools.partial(pattern.sub, REDACTED)

    def keep_label(match: re.Match[str]) -> str:
        start, end = match.span("secret")
        if start < 0:
            return match.group(0)
        whole = match.group(0)
        offset = match.start()
        return whole[: start - offset] + REDACTED + whole[end - offset :]

    return functools.partial(pattern.sub, keep_label)


def redact_text(text: str) -> str:
    """`text` with every secret shape replaced, keeping each one's label."""
    lowered = _folded(text)
    for scan, needles in _scanners():
        if needles and not any(needle in lowered for needle in needles):
            continue
        changed = scan(text)
        if changed != text:
            lowered = _folded(changed)
        text = changed
    return text


_FOLD = {0x130: "i", 0x131: "i", 0x17F: "s"}
"""The characters other than ASCII letters that `(?i)` matches to one: U+0130 and U+0131 (the
dotted capital and dotless small i) and U+017F (long s); U+212A (the Kelvin sign) too, which
`str.lower` already makes `k`. U+0130 is mapped before lower-casing, which would make it two
characters and split a word."""


def _folded(text: str) -> str:
    """`text` lower-cased as `(?i)` sees ASCII letters, for the search for `_NEEDLES`."""
    return (text if text.isascii() else text.translate(_FOLD)).lower()


# -- values ----------------------------------------------------------------------------------


def redact(value: Any) -> Any:
    """`value` with credentials replaced by `[REDACTED]`: by key, and by shape in every string.

    Containers are copied (mappings as dicts, sequences as lists); strings that hold JSON are
    redacted inside and written back as compact JSON only when something changed.
    """
    kind = type(value)
    if kind is str:
        return _redact_string(value)
    if kind in _SCALARS:
        return value
    if kind is dict or isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if isinstance(k, str) and is_credential_key(k):
                out[k] = REDACTED
            else:
                out[k] = _redact_item(v)
        return out
    if kind is list or kind is tuple or isinstance(value, list | tuple):
        return [_redact_item(v) for v in value]
    if isinstance(value, str):  # a subclass (a str Enum): scanned, never cached
        return _redact_scan(value)
    return value


_NAMED_SCHEMAS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
"""JSON Schema keywords whose keys are names (of parameters, of definitions), not data."""
_EXAMPLE_VALUES = frozenset({"default", "examples", "const", "enum"})
"""JSON Schema keywords that hold values of the parameter itself."""


def redact_schema(value: Any, *, secret: bool = False) -> Any:
    """A tool's schema (or a list of them) redacted as a schema, not as data.

    A parameter named like a credential (`password`, `apiKey`) keeps its definition (its type,
    description, constraints: what a reader of a golden file needs to explain a schema diff);
    the values such a parameter's definition holds (`default`, `examples`, `const`, `enum`)
    are `[REDACTED]`. Everything else is redacted as `redact` does: credential-shaped keys
    elsewhere (`default: {token: …}`), and secret shapes in every string.
    """
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if key in _NAMED_SCHEMAS and isinstance(item, Mapping):
                out[key] = {
                    name: redact_schema(
                        sub, secret=isinstance(name, str) and is_credential_key(name)
                    )
                    for name, sub in item.items()
                }
            elif (secret and key in _EXAMPLE_VALUES) or (
                isinstance(key, str) and is_credential_key(key)
            ):
                out[key] = REDACTED
            else:
                out[key] = redact_schema(item, secret=secret)
        return out
    if isinstance(value, list | tuple):
        return [redact_schema(item, secret=secret) for item in value]
    return _redact_item(value)


def _redact_item(value: Any) -> Any:
    """`redact` of an item of a container, with the two commonest kinds settled first."""
    kind = type(value)
    if kind is str:
        return _redact_cached(value) if len(value) <= _CACHED_LENGTH else _redact_scan(value)
    if kind in _SCALARS:
        return value
    return redact(value)


_SCALARS = frozenset({int, float, bool, type(None)})
"""Exact types that `redact` returns as they are, without the container checks."""

_CACHED_LENGTH = 4096
"""Strings up to this length keep their redacted form in a cache (`_redact_cached`)."""


def _redact_string(text: str) -> str:
    if len(text) <= _CACHED_LENGTH:
        return _redact_cached(text)
    return _redact_scan(text)


@functools.lru_cache(maxsize=4096)
def _redact_cached(text: str) -> str:
    """`_redact_scan`, remembered: a run's requests repeat its prompt, schemas and messages.

    Redaction is deterministic for the process (the shapes are fixed by `_scanners`' first
    call), so a cached answer is the answer. Bounded: at most 4,096 strings of at most
    `_CACHED_LENGTH` characters.
    """
    return _redact_scan(text)


def _redact_scan(text: str) -> str:
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            parsed = json.loads(text)
        except ValueError:
            pass
        else:
            if isinstance(parsed, dict | list):
                cleaned = redact(parsed)
                if cleaned != parsed:
                    return json.dumps(cleaned, ensure_ascii=False, separators=(",", ":"))
                return text
    return redact_text(text)


_ID_PREFIXES = ("run_", "ses_", "exk_", "apr_", "att_")
_VOLATILE_ID = re.compile(r"\b(run|ses|exk|apr|att)_[0-9a-f]{32}\b")


def stable_ids(data: Any) -> Any:
    """Replace generated ids (`run_…`, `ses_…`, `exk_…`, `apr_…`) by numbered stand-ins.

    The first execution key met becomes `exk_1`, the next `exk_2`, and so on, in document
    order, so the same run recorded twice gives the same file.
    """
    if isinstance(data, Mapping | list | tuple) and not _may_hold_ids(_text(data)):
        return data
    return _stable(data)


def _stable(data: Any) -> Any:
    return _StableIds().walk(data)


class _StableIds:
    """Generated ids numbered per prefix in the order they first appear (`stable_ids`).

    A class, not a closure that calls itself: such a closure is a reference cycle that only the
    garbage collector frees, one for each comparison.
    """

    __slots__ = ("counters", "seen")

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}
        self.counters: dict[str, int] = {}

    def stand_in(self, match: re.Match[str]) -> str:
        found = match.group(0)
        seen = self.seen
        if found not in seen:
            prefix = match.group(1)
            count = self.counters[prefix] = self.counters.get(prefix, 0) + 1
            seen[found] = f"{prefix}_{count}"
        return seen[found]

    def walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return _VOLATILE_ID.sub(self.stand_in, value) if "_" in value else value
        if isinstance(value, Mapping):
            return {k: self.walk(v) for k, v in value.items()}
        if isinstance(value, Sequence):
            return [self.walk(v) for v in value]
        return value


def comparable(value: Any) -> Any:
    """`value` as recordings compare it: redacted, with generated ids made stable."""
    return stable_ids(redact(value))


def holds_ids(value: Any) -> bool:
    """Whether `stable_ids` would find a generated id to replace in `value`."""
    return _may_hold_ids(_text(value))


def _may_hold_ids(text: str) -> bool:
    return any(prefix in text for prefix in _ID_PREFIXES) and _VOLATILE_ID.search(text) is not None


def _text(value: Any) -> str:
    """JSON text of `value` for the quick scan for ids."""
    return json.dumps(value, ensure_ascii=False, default=str)
