"""Hostile golden files and rule conditions: a typed error or a valid value, nothing else."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_harness.cel import argument_reads
from pytest_harness.errors import ArchiveError
from pytest_harness.recording.model import Recording

V1 = Path(__file__).parent / "golden_v1" / "test_big_refund_approved_by_finance.yaml"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    key=st.sampled_from(["model_turns", "spec_digest", "trace", "outcome", "approvals", "history"]),
    value=json_values,
    turn_key=st.sampled_from(["request_digest", "answer", "model", "request", "extra"]),
    turn_value=json_values,
)
def test_a_damaged_format_1_file_loads_or_is_an_archive_error(
    tmp_path_factory, key, value, turn_key, turn_value
) -> None:
    data = yaml.safe_load(V1.read_text())
    if isinstance(data["model_turns"], list) and data["model_turns"]:
        data["model_turns"][0][turn_key] = turn_value
    data[key] = value
    path = tmp_path_factory.mktemp("hostile") / "r.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        recording = Recording.load(path)
    except ArchiveError as exc:
        assert str(path) in str(exc)
    else:
        assert recording.spec_digest == ""
        assert all(t.parts is None for t in recording.model_turns)


@given(st.text(max_size=80))
def test_scanning_any_condition_for_argument_reads_never_fails(source: str) -> None:
    reads = argument_reads(source)
    assert all(isinstance(n, str) for n in reads.names + reads.tools)


@given(
    name=st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True),
    guard=st.sampled_from(["has", "in", None]),
)
def test_argument_reads_finds_the_name_unless_it_is_guarded(name: str, guard: str | None) -> None:
    source = f'tool == "t" && args.{name} > 1'
    if guard == "has":
        source = f"has(args.{name}) && {source}"
    elif guard == "in":
        source = f'"{name}" in args && {source}'
    reads = argument_reads(source)
    assert reads.tools == ("t",)
    assert reads.names == (() if guard else (name,))


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=600))
def test_any_bytes_as_a_hx_archive_load_or_are_an_archive_error(tmp_path_factory, data) -> None:
    # the archive reader's own suite (hostile corpus, mutated ZIPs) is tests/archive/
    path = tmp_path_factory.mktemp("hx") / "incident.hx"
    path.write_bytes(b"PK\x03\x04" + data)
    with contextlib.suppress(ArchiveError):
        Recording.load(path)


SHOP = Path(__file__).parents[2] / "recordings" / "test_shop"
GOLDEN = SHOP / "test_big_refund_approved_by_finance.yaml"


def _principal_without_id(data: dict) -> None:
    del data["principal"]["id"]


def _principal_roles_a_number(data: dict) -> None:
    data["principal"]["roles"] = 7


def _outcome_without_text(data: dict) -> None:
    del data["tool_results"][0]["outcome"]["text"]


def _outcome_kind_a_list(data: dict) -> None:
    data["tool_results"][0]["outcome"]["kind"] = ["ok"]


def _outcome_ok_against_its_kind(data: dict) -> None:
    data["tool_results"][0]["outcome"]["ok"] = False


def _approver_roles_numbers(data: dict) -> None:
    data["approvals"][0]["approver"]["roles"] = [1]


def _model_declaration_a_string(data: dict) -> None:
    data["models"]["default"] = "[REDACTED]"


def _model_options_a_list(data: dict) -> None:
    data["models"]["default"]["options"] = ["temperature"]


def _model_options_a_word(data: dict) -> None:
    data["models"]["default"]["options"] = "sometimes"


def _model_use_a_list(data: dict) -> None:
    data["models"]["default"]["use"] = ["openai"]


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (_principal_without_id, "principal: missing required key 'id'"),
        (_principal_roles_a_number, "principal.roles: expected a list, got 7"),
        (_outcome_without_text, "tool_results[0].outcome: missing required key 'text'"),
        (_outcome_kind_a_list, "tool_results[0].outcome.kind: expected 'ok', "),
        (_outcome_ok_against_its_kind, "an outcome of kind 'ok' cannot have ok: False"),
        (_approver_roles_numbers, "approvals[0].approver.roles[0]: expected a string, got 1"),
        (_model_declaration_a_string, "models.default: expected a mapping, got '[REDACTED]'"),
        (_model_options_a_list, "models.default.options: expected a mapping"),
        (_model_use_a_list, "models.default.use: expected a string"),
        (
            _model_options_a_word,
            "models.default.options: expected a mapping or '(environment)', got 'sometimes'",
        ),
    ],
)
def test_a_field_the_replay_reads_is_checked_when_the_file_loads(tmp_path, damage, says) -> None:
    """Who ran it, who approved, a tool's outcome: a bad shape is an `ArchiveError` naming the
    file, line and key when the file loads (a replay crashed on each with a bare error)."""
    data = yaml.safe_load(GOLDEN.read_text())
    damage(data)
    path = tmp_path / "damaged.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ArchiveError, match=r"bad recording file .*damaged\.yaml:\d+ ") as caught:
        Recording.load(path)
    assert says in str(caught.value)
