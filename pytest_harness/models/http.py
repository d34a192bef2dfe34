"""What the live providers share: the HTTP exchange, failures as `ModelError`s, retry delays.

`HttpProvider` posts one request (and reads a JSON answer, or an SSE stream when the request
wants text deltas) and turns every failure into a `ModelError` whose message never holds the
API key; each wire format (`openai`, `anthropic`) subclasses it to map requests and answers.
httpx is imported by this module only, and only when a provider sends its first request:
building one (at load, where its settings are checked) imports neither httpx nor `ssl`, so a
process that loads a spec with a live model but never calls it does not pay for them. What an
error body says (message, status, type) is read by `models.error_body`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import random
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self
from urllib.parse import urlsplit, urlunsplit

from pytest_harness.errors import ModelError
from pytest_harness.hookspecs import ProviderConfig
from pytest_harness.models.base import ModelRequest, ModelResponse
from pytest_harness.models.error_body import (
    REPORTED_KINDS,
    error_codes,
    error_detail,
    error_status,
    is_refusal,
    json_or_none,
    snippet,
    status_kind,
)
from pytest_harness.models.wire import Malformed, ServerReported, StreamState, iter_sse

if TYPE_CHECKING:
    import ssl

    import httpx

__all__ = [
    "BACKOFF_BASE",
    "BACKOFF_CAP",
    "DEFAULT_TIMEOUT",
    "RETRY_AFTER_CAP",
    "HttpProvider",
    "backoff_delay",
    "parse_retry_after",
    "safe_url",
]

DEFAULT_TIMEOUT = 60.0
"""Seconds one model request may take when the model sets no `timeout`."""
BACKOFF_BASE = 0.5
"""Seconds before the first retry (before jitter); doubled for each further retry."""
BACKOFF_CAP = 20.0
"""The longest backoff between two attempts."""
RETRY_AFTER_CAP = 60.0
"""The longest `Retry-After` honoured: a longer ask is cut so one answer cannot park a run."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOKEN_LIMITS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
"""Options that cap an answer's output tokens: each must be a positive whole number."""


class HttpProvider:
    """A live provider speaking JSON over HTTP; subclasses supply the wire format.

    One httpx client per request (sharing one TLS context) keeps the provider free of event-loop
    state, so runs on any loop may share it and nothing is left open to close.
    """

    name: str
    live = True
    default_base_url: ClassVar[str]
    default_key_env: ClassVar[str]
    path: ClassVar[str]
    """Appended to `base_url` to make the endpoint."""
    reserved_options: ClassVar[frozenset[str]]
    """Body keys the provider sets from the request, which `options` may not set."""

    def __init__(
        self,
        *,
        model: str,
        model_name: str | None = None,
        base_url: str | None = None,
        api_key_env: str | None = None,
        timeout: float | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.model_name = model_name or model
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.api_key_env = api_key_env or self.default_key_env
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        self.options = dict(options or {})
        problem = self.settings_problem(
            base_url=self.base_url, api_key_env=self.api_key_env, options=self.options
        )
        if problem is not None:
            raise ValueError(problem[1])
        self.endpoint = self.base_url + self.path
        self._last_retry_after: float | None = None

    @classmethod
    def from_config(cls, config: ProviderConfig) -> Self:
        """Build from a model of the spec; settings errors point at their line."""
        spec = config.model
        where = config.key_path
        if not spec.model:
            raise config.spec.error(
                f"a {cls.name} model needs `model:` (the provider's model id)", where
            )
        problem = cls.settings_problem(
            base_url=(spec.base_url or cls.default_base_url).rstrip("/"),
            api_key_env=spec.api_key_env or cls.default_key_env,
            options=spec.options,
        )
        if problem is not None:
            raise config.spec.error(problem[1], (*where, *problem[0]))
        return cls(
            model=spec.model,
            model_name=config.name,
            base_url=spec.base_url,
            api_key_env=spec.api_key_env,
            timeout=spec.timeout,
            options=spec.options,
        )

    @classmethod
    def settings_problem(
        cls, *, base_url: str, api_key_env: str, options: Mapping[str, Any]
    ) -> tuple[tuple[str, ...], str] | None:
        """The setting that is wrong (its key path) and why, or None.

        Never quotes a value that may be secret (`base_url` is shown without user info).
        """
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return ("base_url",), (
                f"base_url must be an http(s) URL like {cls.default_base_url}, "
                f"got {safe_url(base_url)!r}"
            )
        if not _ENV_NAME.match(api_key_env):
            return ("api_key_env",), (
                "api_key_env names the environment variable that holds the API key (like "
                f"{cls.default_key_env}), not the key itself"
            )
        clash = sorted(set(options) & cls.reserved_options)
        if clash:
            return ("options",), (
                f"options cannot set {', '.join(clash)}: the {cls.name} provider sets "
                f"{'it' if len(clash) == 1 else 'them'} from the request"
            )
        for name in _TOKEN_LIMITS:
            value = options.get(name)
            if name in options and (
                not isinstance(value, int) or isinstance(value, bool) or value <= 0
            ):
                return ("options", name), (
                    f"options.{name} must be a positive whole number of tokens, got {value!r:.80}"
                )
        return None

    # -- the wire format, supplied by subclasses ----------------------------------------------

    def headers(self, key: str) -> dict[str, str]:
        """The headers of a request, with the API key."""
        raise NotImplementedError

    def body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """The JSON body of a request."""
        raise NotImplementedError

    def parse(self, data: Any, request: ModelRequest) -> ModelResponse:
        """The answer in a JSON body; `Malformed` or `ServerReported` when it holds none."""
        raise NotImplementedError

    def stream_state(self) -> StreamState:
        """A fresh fold of one SSE stream."""
        raise NotImplementedError

    # -- the exchange -------------------------------------------------------------------------

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one request (streamed when `request.on_text` is set), or raise `ModelError`."""
        try:
            response = await self._complete(request)
        except ModelError as exc:
            self._last_retry_after = exc.retry_after
            raise
        self._last_retry_after = None
        return response

    def retry_delay(self, attempt: int, error: ModelError | None = None) -> float:
        """The server's `Retry-After` when it gave one, else exponential backoff with jitter.

        Without `error`, the `Retry-After` of this provider's latest failure is used: one
        provider serves every run of a harness, and a rate limit applies to all of them.
        """
        retry_after = error.retry_after if error is not None else self._last_retry_after
        if retry_after is not None:
            return min(retry_after, RETRY_AFTER_CAP)
        return backoff_delay(attempt)

    async def _complete(self, request: ModelRequest) -> ModelResponse:
        import httpx  # on the first request, not when the provider is built (see the docstring)

        key = self._api_key()
        failure: ModelError
        try:
            async with asyncio.timeout(self.timeout):
                if request.on_text is None:
                    body = self.body(request, stream=False)
                    data = await self._post(key, body, request.on_first_event)
                else:
                    body = self.body(request, stream=True)
                    data = await self._stream(key, body, request.on_text, request.on_first_event)
            return self.parse(data, request)
        except TimeoutError:
            failure = self.error("timeout", f"no answer within {self.timeout:g}s")
        except httpx.TimeoutException as exc:
            failure = self.error("timeout", f"timed out ({_describe(exc, key)})")
        except (httpx.NetworkError, httpx.ProxyError) as exc:
            failure = self.error("timeout", f"could not reach the server ({_describe(exc, key)})")
        except httpx.HTTPError as exc:
            failure = self.error("server", f"the exchange broke off ({_describe(exc, key)})")
        except Malformed as exc:
            kind = "server" if exc.cut else "malformed"
            reason = f"answered with a malformed body: {_redact(exc, key)}"
            failure = self.error(kind, reason, usage=exc.usage)
        except ServerReported as exc:
            failure = self.reported_error(exc.error, key, usage=exc.usage)
        raise failure  # outside the handlers, so no httpx exception (with headers) is chained

    def _api_key(self) -> str:
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise self.error(
                "auth",
                f"no API key: set the environment variable {self.api_key_env} "
                "(the model's `api_key_env`)",
            )
        return key

    def _client(self) -> httpx.AsyncClient:
        import httpx

        return httpx.AsyncClient(timeout=httpx.Timeout(self.timeout), verify=_tls_context())

    async def _post(
        self, key: str, body: dict[str, Any], on_first_event: Callable[[], None] | None
    ) -> Any:
        async with (
            self._client() as client,
            client.stream("POST", self.endpoint, headers=self.headers(key), json=body) as response,
        ):
            if on_first_event is not None:
                on_first_event()  # the status line and headers: the reply's first bytes
            await response.aread()
        if not response.is_success:
            raise self.status_error(response, key)
        try:
            return json.loads(response.content)
        except ValueError:
            raise Malformed(
                f"HTTP {response.status_code} with a body that is not JSON: "
                f"{snippet(response.content)}"
            ) from None

    async def _stream(
        self,
        key: str,
        body: dict[str, Any],
        on_text: Callable[[str], None],
        on_first_event: Callable[[], None] | None,
    ) -> Any:
        state = self.stream_state()
        async with (
            self._client() as client,
            client.stream("POST", self.endpoint, headers=self.headers(key), json=body) as response,
        ):
            if not response.is_success:
                if on_first_event is not None:
                    on_first_event()  # an error status is a reply, not a silence
                await response.aread()
                raise self.status_error(response, key)
            first = on_first_event
            async for event, data in iter_sse(response.aiter_lines()):
                if first is not None:  # the stream's first event, not just its headers
                    first()
                    first = None
                delta = state.feed(event, data)
                if delta:
                    on_text(delta)
        return state.body()

    # -- errors -------------------------------------------------------------------------------

    def error(
        self,
        kind: str,
        reason: str,
        *,
        retry_after: float | None = None,
        usage: tuple[int, int] | None = None,
    ) -> ModelError:
        """A `ModelError` of `kind` that names the provider, the model and the endpoint."""
        who = f"{self.name} model {self.model_name!r} ({self.model} at {safe_url(self.endpoint)})"
        return ModelError(
            kind, f"{who}: {reason}", model=self.model_name, retry_after=retry_after, usage=usage
        )

    def status_error(self, response: httpx.Response, key: str) -> ModelError:
        """The `ModelError` for an answer with an HTTP error status."""
        status = response.status_code
        payload = json_or_none(response.content)
        error = payload.get("error") if isinstance(payload, Mapping) else None
        detail = _redact(error_detail(error) or snippet(response.content), key)
        retry_after = parse_retry_after(response.headers)
        if status in (401, 403):
            return self.error(
                "auth",
                f"the server refused the API key in ${self.api_key_env} (HTTP {status}): {detail}",
            )
        if status == 429:
            kind, what = "rate_limit", "rate limited"
        elif status == 408:
            kind, what = "timeout", "the server timed out"
        elif status == 409 or status >= 500:
            kind, what = "server", "server error"
        elif is_refusal(error):
            kind, what = "refusal", "refused by the provider's content filter"
        elif 300 <= status < 400:
            location = safe_url(response.headers.get("location", ""))
            kind, what = "bad_request", f"redirected to {location!r}; set base_url to it"
        elif status == 404:
            kind, what = "bad_request", "not found; check base_url and the model id"
        else:
            kind, what = "bad_request", "the server rejected the request"
        wait = f", retry after {retry_after:g}s" if retry_after is not None else ""
        return self.error(kind, f"{what} (HTTP {status}{wait}): {detail}", retry_after=retry_after)

    def reported_error(
        self, error: Any, key: str, *, usage: tuple[int, int] | None = None
    ) -> ModelError:
        """The `ModelError` for an error the server reported inside an answer or a stream.

        A numeric `code` (OpenRouter's errors carry the HTTP status they stand for) maps like
        that HTTP status: 429 a rate limit, 401/403 auth, 408 a time-out, 5xx a server error,
        another 4xx a bad request (not retried). A textual `type`/`code` maps by name.
        """
        codes = error_codes(error)
        status = error_status(error)
        kind = "refusal" if is_refusal(error) else "server"
        if kind == "server" and status is not None:
            kind = status_kind(status)
        for code in codes if kind == "server" and status is None else ():
            if code in REPORTED_KINDS:
                kind = REPORTED_KINDS[code]
                break
        detail = _redact(error_detail(error) or snippet(json.dumps(error, default=str)), key)
        what = codes[0] if codes else (f"error {status}" if status is not None else "an error")
        return self.error(kind, f"the server reported {what}: {detail}", usage=usage)


def backoff_delay(attempt: int) -> float:
    """Exponential backoff with jitter: half to all of `0.5 * 2**(attempt-1)`, at most 20 s."""
    exponent = max(0, min(attempt - 1, 32))
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * float(2**exponent))
    return ceiling * (0.5 + random.random() / 2)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            seconds = float(millis) / 1000
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds):
            return max(0.0, seconds)
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        from datetime import UTC, datetime
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def safe_url(url: str) -> str:
    """`url` without user info and query, which may hold credentials."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
    except ValueError:
        return "<invalid URL>"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every client: building one loads the CA bundle (tens of ms)."""
    import httpx

    return httpx.create_ssl_context()


def _redact(value: object, key: str) -> str:
    text = str(value)
    return text.replace(key, "[REDACTED]") if key else text


def _describe(exc: BaseException, key: str) -> str:
    text = str(exc).strip()
    return _redact(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, key)
