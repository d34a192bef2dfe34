"""`pytest_harness.redaction`: credential keys in any casing, secret shapes in free text."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_harness.redaction import (
    REDACTED,
    SECRET_PATTERNS,
    SecretPattern,
    _scanner,
    comparable,
    is_credential_key,
    redact,
    redact_schema,
    redact_text,
)

CREDENTIAL_KEYS = [
    "password",
    "Password",
    "passwd",
    "passphrase",
    "secret",
    "client_secret",
    "clientSecret",
    "ClientSecret",
    "CLIENT_SECRET",
    "client-secret",
    "accessToken",
    "access_token",
    "refreshToken",
    "secretKey",
    "secret_key",
    "sessionToken",
    "authToken",
    "auth",
    "Authorization",
    "x-api-key",
    "X-Api-Key",
    "apiKey",
    "api_key",
    "APIKey",
    "apikey",
    "privateKey",
    "private-key",
    "set-cookie",
    "Cookie",
    "credentials",
    "dbPassword",
    "accesstoken",
    "AWS_SECRET_ACCESS_KEY",
    "github.token",
]
ORDINARY_KEYS = [
    "max_tokens",
    "input_tokens",
    "tokens",
    "token_count",
    "execution_key",
    "idempotency_key",
    "sort_key",
    "key",
    "author",
    "authority",
    "keys",
    "monkey",
    "passage",
    "secretary_name",
    "order_id",
    "amount",
    "session_id",
    "",
]


@pytest.mark.parametrize("key", CREDENTIAL_KEYS)
def test_credential_keys_in_any_casing(key: str) -> None:
    assert is_credential_key(key)
    assert redact({key: "v4lue", "n": 1}) == {key: REDACTED, "n": 1}


@pytest.mark.parametrize("key", ORDINARY_KEYS)
def test_ordinary_keys_are_kept(key: str) -> None:
    assert not is_credential_key(key)
    assert redact({key: 5}) == {key: 5}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abcdefghijklmnop", "Authorization: Bearer [REDACTED]"),
        ('{"authorization": "Basic dXNlcjpwYXNz"}', '{"authorization":"[REDACTED]"}'),
        ("call with bearer abc.def-ghi_jkl", "call with bearer [REDACTED]"),
        ("sk-ant-api03-abcdefghijklmnopqrstu", "sk-ant-api03-[REDACTED]"),
        ("key sk-abcdefghijklmnopqrstuvwx", "key sk-[REDACTED]"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_[REDACTED]"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijk", "github_pat_[REDACTED]"),
        ("id AKIAIOSFODNN7EXAMPLE ok", "id AKIA[REDACTED] ok"),
        ("postgresql://app:hunter2@db/x", "postgresql://app:[REDACTED]@db/x"),
        ("https://user:p%40ss@example.com:8443/", "https://user:[REDACTED]@example.com:8443/"),
        ("redis://:pass123@host", "redis://:[REDACTED]@host"),
        ("REDIS_URL=rediss://:p%40ss@cache:6380/0", "REDIS_URL=rediss://:[REDACTED]@cache:6380/0"),
        ("password=hunter2&next=1", "password=[REDACTED]&next=1"),
        ("Your password: hunter2.", "Your password: [REDACTED]."),
        ("clientSecret = 'a b c'", "clientSecret = '[REDACTED]'"),
        ('log: {"accessToken": "t0k", "n": 1}', 'log: {"accessToken": "[REDACTED]", "n": 1}'),
        ('escaped {\\"apiKey\\": \\"v\\"}', 'escaped {\\"apiKey\\": \\"[REDACTED]\\"}'),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
            "-----BEGIN RSA PRIVATE KEY-----[REDACTED]-----END RSA PRIVATE KEY-----",
        ),
    ],
)
def test_secret_shapes_in_free_text_keep_their_label(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens=5, token_count=3",
        "Bearer of bad news",
        "Refund $250 on order A-1001.",
        "see https://example.com/a:b",
        "run_0123456789abcdef0123456789abcdef",
        "the key to success",
    ],
)
def test_ordinary_text_is_kept(text: str) -> None:
    assert redact_text(text) == text


def test_json_inside_strings_is_redacted_at_any_depth() -> None:
    inner = json.dumps({"refreshToken": "r", "deeper": json.dumps({"secretKey": "s"})})
    got = redact({"raw": inner})
    assert json.loads(got["raw"])["refreshToken"] == REDACTED
    assert json.loads(json.loads(got["raw"])["deeper"])["secretKey"] == REDACTED


def test_a_pattern_that_does_not_compile_names_itself() -> None:
    with pytest.raises(ValueError, match="secret pattern 'bad' does not compile"):
        SecretPattern("bad", "(").compiled()


def test_comparable_redacts_and_makes_ids_stable() -> None:
    value = {"a": "run_" + "a" * 32, "password": "x", "t": "token=abc"}
    assert comparable(value) == {"a": "run_1", "password": REDACTED, "t": "token=[REDACTED]"}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_redaction_is_idempotent_and_keeps_the_shape(value: object) -> None:
    once = redact(value)
    assert redact(once) == once
    assert type(once) is (list if isinstance(value, tuple) else type(value))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_redacting_text_never_fails_and_is_idempotent(text: str) -> None:
    once = redact_text(text)
    assert redact_text(once) == once


_URL_USER = st.text(alphabet=string.ascii_letters + string.digits + "-._~%!$&()*+,;", max_size=12)
"""A URL's user, possibly empty (no `:` or `=`, so that no `key=value` shape is made of it)."""
_URL_SECRET = st.text(
    alphabet=string.ascii_letters + string.digits + "-._~%!$&()*+,;=:[]", min_size=1, max_size=12
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["redis", "rediss", "postgresql", "amqp", "https", "mongodb+srv"]),
    _URL_USER,
    _URL_SECRET,
)
def test_a_url_password_is_redacted_with_or_without_a_user(
    scheme: str, user: str, secret: str
) -> None:
    # `redis://:password@host` (no user) is the usual Redis form
    text = f"connect to {scheme}://{user}:{secret}@db.internal:6379/0 now"
    assert redact_text(text) == f"connect to {scheme}://{user}:[REDACTED]@db.internal:6379/0 now"


def _every_shape(text: str) -> str:
    """`redact_text` without the substring search that skips shapes: every shape runs."""
    for pattern in SECRET_PATTERNS:
        text = _scanner(pattern.compiled())(text)
    return text


_SHAPE_PIECES = st.sampled_from(
    [
        "password",
        "PaSsWd",
        "pa\u017fsword",
        "sess\u0130on_id",
        "sess\u0131on-id",
        "x-api-\u212aey",
        "secretKey",
        "TOKEN",
        "auth",
        "Cookie",
        "credentials",
        "Bearer ",
        "authorization:",
        "sk-",
        "sk-ant-api03-",
        "ghp_",
        "github_pat_",
        "glpat-",
        "AKIA",
        "xoxb-",
        "sk_live_",
        "AIza",
        "SG.",
        "pypi-AgE",
        "npm_",
        "eyJhbGciOi",
        ".eyJzdWIi",
        "://user:",
        "://:",
        "@host",
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----END RSA PRIVATE KEY-----",
        "=",
        ": ",
        "'",
        '"',
        '\\"',
        " ",
        "\n",
        "abcdefghijklmnopqrstuvwxyz0123456789",
        "ABCDEFGHIJKLMNOP",
        "_-.",
        "\u00e9",
        "\U0001f600",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_SHAPE_PIECES, st.text(max_size=8)), max_size=24).map("".join))
def test_skipping_shapes_whose_substrings_are_absent_changes_nothing(text: str) -> None:
    # the substring search only skips a shape that cannot match: the result is the same as
    # running every shape, whatever the casing (and the letters `(?i)` takes for ASCII ones)
    assert redact_text(text) == _every_shape(text)


SHAPE_SAMPLES = {
    "private-key-block": "-----BEGIN EC PRIVATE KEY-----\nabc\n-----END EC PRIVATE KEY-----",
    "authorization-header": "Proxy-Authorization: Basic dXNlcjpwYXNz",
    "bearer-token": "BEARER abcdefgh.ijk",
    "anthropic-key": "sk-ant-abcdefghijklmnopqrstuv",
    "openai-key": "sk-proj-abcdefghijklmnopqrstuv",
    "github-token": "gho_abcdefghijklmnopqrstuvwxyz",
    "gitlab-token": "glsoat-abcdefghijklmnopqrstuvwxyz",
    "aws-access-key-id": "ASIAABCDEFGHIJKLMNOP",
    "slack-token": "xoxp-1234567890-abc",
    "stripe-key": "rk_test_abcdefghijklmnop1234",
    "google-api-key": "AIza" + "a" * 35,
    "sendgrid-key": "SG." + "a" * 22 + "." + "b" * 43,
    "pypi-token": "pypi-AgE" + "a" * 50,
    "npm-token": "npm_" + "a" * 36,
    "jwt": "eyJhbGciOiJI.eyJzdWIiOiIx.sig",
    "url-credentials": "redis://u:s3cr3t@cache",
    "quoted-key-value": "db_passwd = 'a b'",
    "key-value": "X-Session-Id: abc123",
}


@pytest.mark.parametrize(
    "text",
    [
        *SHAPE_SAMPLES.values(),
        "pa\u017fsword=hunter2",
        "sess\u0130on_id=abc123",
        "sess\u0131on-id: abc123",
        "x-api-\u212aey: zzzzzzzz",
        "\u00e9 AUTH_TOKEN='t0k'",
        "COOKIE=abc; credentialS: xyz",
    ],
)
def test_every_shape_still_finds_its_secrets_in_any_casing(text: str) -> None:
    assert redact_text(text) == _every_shape(text) != text


def test_every_built_in_shape_has_a_sample() -> None:
    assert set(SHAPE_SAMPLES) == {pattern.name for pattern in SECRET_PATTERNS}


def test_a_long_text_with_no_secret_is_kept_and_a_late_secret_is_found() -> None:
    # a 320 KB tool result: the generic key-value shapes alone cost about 0.5 s a scan
    text = "order A-1001 shipped to Berlin; " * 10_000
    assert redact_text(text) == text
    assert redact_text(text + " password=hunter2") == text + " password=[REDACTED]"


def test_a_tool_schema_keeps_the_definition_of_a_parameter_named_like_a_credential() -> None:
    schema = {
        "name": "login",
        "description": "Log in; the admin key sk-proj-abcdefghijklmnopqrstuvwx is not for you",
        "parameters": {
            "type": "object",
            "properties": {
                "user": {"type": "string", "default": "ann"},
                "password": {"type": "string", "minLength": 12, "default": "hunter2hunter2"},
                "apiKey": {"anyOf": [{"type": "string", "examples": ["k-1"]}, {"type": "null"}]},
                "options": {
                    "type": "object",
                    "properties": {"token": {"type": "string", "enum": ["t-1", "t-2"]}},
                    "default": {"token": "t-1", "mode": "fast"},
                },
            },
            "required": ["user", "password"],
            "$defs": {"secret": {"type": "string", "const": "s-1"}},
        },
    }
    done = redact_schema([schema])[0]
    props = done["parameters"]["properties"]
    assert props["user"] == {"type": "string", "default": "ann"}
    assert props["password"] == {"type": "string", "minLength": 12, "default": REDACTED}
    assert props["apiKey"] == {
        "anyOf": [{"type": "string", "examples": REDACTED}, {"type": "null"}]
    }
    options = props["options"]
    assert options["properties"]["token"] == {"type": "string", "enum": REDACTED}
    assert options["default"] == {"token": REDACTED, "mode": "fast"}  # data: redacted by key
    assert done["parameters"]["required"] == ["user", "password"]
    assert done["parameters"]["$defs"]["secret"] == {"type": "string", "const": REDACTED}
    assert "sk-proj-abcdefghijklmnopqrstuvwx" not in done["description"]
    assert redact_schema(done) == done  # idempotent, as every redaction is
    # plain `redact` would have replaced the definitions whole
    assert redact([schema])[0]["parameters"]["properties"]["password"] == REDACTED
