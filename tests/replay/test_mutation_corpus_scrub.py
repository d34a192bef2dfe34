"""The mutation corpus, on guards that scrub secrets: what the golden hides, the replay keeps.

A `redact` guard that scrubs `sk-…` keys fires on the raw text of a run; golden files and `.hx`
archives keep that text redacted their own way (`sk-[REDACTED]`), and the replay plays it back,
so the guard once found nothing there and an unchanged spec replayed as drift (and
`--update-recordings` would have written the golden again without the guard). A built-in
guard's decision on text redaction changes now keeps `config`, `seen` and `left_text`
(`runtime.guard_memory`): an unchanged spec replays `same` from either file, and every change
to such a guard (its pattern, action, target, id, place in the chain, or the guard removed)
still replays as drift naming it, as does other text on the tape. A guard whose check is
Python code keeps none of it, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

import pytest_harness as ph
from pytest_harness.errors import ArchiveError
from pytest_harness.recording.golden import check_recording
from pytest_harness.replay.report import ReplayReport
from tests.replay.test_mutation_corpus import edit, forget, make_app
from tests.replay.test_mutation_corpus_hunt import SCRUB_SPEC, SCRUB_TOOLS

GUARDS = ("no-keys-in", "no-keys-out")
KEPT = ("config", "seen", "left_text")

# the answer's key matches a second output guard too, which never fires after the first one
LONG_KEYS = """\
  - id: long-keys
    on: output
    check: regex
    pattern: 'sk-[a-z]{24}'
    action: warn
"""
NO_KEYS_IN = """\
  - id: no-keys-in
    on: tool_result
    check: regex
    pattern: 'sk-[A-Za-z0-9]{20,}'
    action: redact
"""
NO_KEYS_OUT = """\
  - id: no-keys-out
    on: output
    check: regex
    pattern: 'sk-[A-Za-z0-9]{20,}'
    action: redact
"""
assert NO_KEYS_IN + NO_KEYS_OUT in SCRUB_SPEC
ORDER_SPEC = SCRUB_SPEC.replace(NO_KEYS_OUT, NO_KEYS_OUT + LONG_KEYS)


async def _record(spec: Path, folder: Path) -> dict[str, Path]:
    """One run of the scrub desk, as a golden file and as an archive exported with payloads."""
    async with ph.load(spec, record=True) as harness:
        result = await harness.run("desk", "my key?", principal="ann")
        policy = ph.ExportPolicy(include_payloads=True)
        return {
            "yaml": await harness.export(result.run_id, folder / "scrub.yaml"),
            "hx": await harness.export(result.run_id, folder / "scrub.hx", policy=policy),
        }


def record(root: Path, spec: str, tools: str = SCRUB_TOOLS) -> dict[str, Path]:
    app = make_app(root / "recorded", spec, tools)
    try:
        return asyncio.run(_record(app.spec, root))
    finally:
        forget(app)


def replay(
    root: Path, path: Path, spec: str, tools: str = SCRUB_TOOLS, replay_tools: str | None = None
) -> ReplayReport:
    """Replay `path` against the desk with `spec` and `tools`."""
    app = make_app(root, spec, tools)

    async def run() -> ReplayReport:
        async with ph.load(app.spec) as harness:
            return await harness.replay(path, tools=replay_tools)

    try:
        return asyncio.run(run())
    finally:
        forget(app)


@pytest.fixture(scope="module")
def scrubbed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return record(tmp_path_factory.mktemp("scrub"), SCRUB_SPEC)


@pytest.fixture(scope="module")
def ordered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return record(tmp_path_factory.mktemp("scrub-order"), ORDER_SPEC)


def guard_details(path: Path) -> dict[str, dict[str, object]]:
    trace = ph.Recording.load(path).trace
    return {d.key: dict(d.detail) for d in trace if d.kind == "guard"}


def test_the_golden_hides_the_keys_and_keeps_what_each_guard_decided(
    scrubbed: dict[str, Path],
) -> None:
    text = scrubbed["yaml"].read_text(encoding="utf-8")
    assert "zyxwvuts" not in text and "abcdefgh" not in text  # neither key leaves the store
    assert "note: bills with sk-[REDACTED]" in text  # the tool result, as the tape plays it
    for source in ("yaml", "hx"):
        details = guard_details(scrubbed[source])
        assert set(details) == set(GUARDS)
        for detail in details.values():
            assert all(str(detail[key]).startswith("sha256:") for key in ("config", "seen"))
        assert details["no-keys-in"]["left_text"] == '{"name":"svc","note":"bills with [REDACTED]"}'
        assert details["no-keys-out"]["left_text"] == "Your key is [REDACTED], keep it safe."


@pytest.mark.parametrize("source", ["yaml", "hx"])
def test_an_unchanged_spec_replays_same_with_both_guards_firing(
    scrubbed: dict[str, Path], source: str, tmp_path: Path
) -> None:
    report = replay(tmp_path / "app", scrubbed[source], SCRUB_SPEC)
    assert report.same, report.render()
    assert report.model_requests_changed == (0, 2), report.render()
    assert report.output == ("Your key is [REDACTED], keep it safe.",) * 2
    replayed = report.replayed.trace
    assert [d.key for d in replayed if d.kind == "guard"] == list(GUARDS)
    if source == "yaml":  # what --update-recordings would write: the same file, guards and all
        saved = report.replayed.save(tmp_path / "again.yaml")
        assert saved.read_bytes() == scrubbed["yaml"].read_bytes()


@dataclass(frozen=True)
class Change:
    name: str
    spec: Callable[[str], str]
    guards: frozenset[str]
    """The guards the report names: the changed one, and those whose text it changes."""


def in_guard(guard: str, old: str, new: str) -> Callable[[str], str]:
    """An edit of `old` to `new` within the spec lines of guard `guard` only."""

    def apply(text: str) -> str:
        head, _, rest = text.partition(f"  - id: {guard}\n")
        block, tail = rest.split("\n  - id: ", 1) if "\n  - id: " in rest else (rest, None)
        assert old in block, (guard, old)
        block = block.replace(old, new, 1)
        return f"{head}  - id: {guard}\n{block}" + ("" if tail is None else f"\n  - id: {tail}")

    return apply


CHANGES = [
    Change(
        "tool_result pattern changed (it still matches the raw key)",
        in_guard("no-keys-in", "[A-Za-z0-9]{20,}", "[a-z]{20,}"),
        frozenset({"no-keys-in"}),
    ),
    Change(
        "output pattern changed (it still matches the raw key)",
        in_guard("no-keys-out", "[A-Za-z0-9]{20,}", "[a-z]{20,}"),
        frozenset({"no-keys-out"}),
    ),
    Change(
        "action redact → block",
        in_guard("no-keys-in", "redact", "block"),
        frozenset({"no-keys-in"}),
    ),
    Change(
        "action redact → warn",
        in_guard("no-keys-out", "redact", "warn"),
        frozenset({"no-keys-out"}),
    ),
    Change(
        "guard removed",
        edit(NO_KEYS_IN, ""),
        frozenset({"no-keys-in"}),
    ),
    Change(
        "guard moved from tool_result to output",
        in_guard("no-keys-in", "on: tool_result", "on: output"),
        frozenset(GUARDS),  # first on the output today: the output guard's chain changed
    ),
    Change(
        "guard renamed", edit("id: no-keys-out", "id: no-secrets-out"), frozenset({"no-keys-out"})
    ),
]


@pytest.mark.parametrize("source", ["yaml", "hx"])
@pytest.mark.parametrize("change", CHANGES, ids=[c.name for c in CHANGES])
def test_a_changed_scrubbing_guard_is_drift_naming_it(
    scrubbed: dict[str, Path], change: Change, source: str, tmp_path: Path
) -> None:
    spec = change.spec(SCRUB_SPEC)
    assert spec != SCRUB_SPEC
    report = replay(tmp_path / "app", scrubbed[source], spec)
    assert not report.same, report.render()
    assert report.failed()
    named = {d.key for d in report.decisions if d.kind == "guard"}
    assert named == change.guards, report.render()  # a guard left as it was replays the same
    for guard in change.guards:
        assert f"guard {guard} →" in report.render()


def test_a_guard_moved_before_another_on_the_same_text_is_drift(
    ordered: dict[str, Path], tmp_path: Path
) -> None:
    """`long-keys` never saw the raw key when recorded; first today, it would have."""
    same = replay(tmp_path / "same", ordered["yaml"], ORDER_SPEC)
    assert same.same, same.render()
    assert "long-keys" not in guard_details(ordered["yaml"])
    swapped = ORDER_SPEC.replace(NO_KEYS_OUT + LONG_KEYS, LONG_KEYS + NO_KEYS_OUT)
    assert swapped != ORDER_SPEC
    report = replay(tmp_path / "swapped", ordered["yaml"], swapped)
    assert not report.same, report.render()
    assert "- step 2 guard no-keys-out → redact (output)" in report.render()


def test_other_text_on_the_tape_is_checked_again(scrubbed: dict[str, Path], tmp_path: Path) -> None:
    """A tool result edited in the golden file: the guard is shown text it never saw."""
    text = scrubbed["yaml"].read_text(encoding="utf-8")
    edited = text.replace("bills with sk-[REDACTED]", "pays with sk-[REDACTED]")
    assert edited.count("pays with") == 3  # the result's value and text, and its tool decision
    path = tmp_path / "edited.yaml"
    path.write_text(edited, encoding="utf-8")
    report = replay(tmp_path / "app", path, SCRUB_SPEC)
    assert not report.same
    assert "- step 1 guard no-keys-in → redact (tool_result)" in report.render()
    assert report.model_requests_changed[0] == 1  # the model is shown what the tape holds


def test_a_changed_prompt_still_changes_the_requests(
    scrubbed: dict[str, Path], tmp_path: Path
) -> None:
    spec = SCRUB_SPEC.replace("tasks:\n  desk: {prompt: p,", "tasks:\n  desk: {prompt: q,")
    assert spec != SCRUB_SPEC
    report = replay(tmp_path / "app", scrubbed["yaml"], spec)
    assert report.same, report.render()  # request drift only, like any prompt change
    assert report.model_requests_changed == (2, 2)
    assert report.requests_explained == ("system prompt: 1 line changed",)


def test_a_real_tool_result_under_safe_tools_is_checked_again(
    scrubbed: dict[str, Path], tmp_path: Path
) -> None:
    """Raw text from a `safe` tool: the check sees all of it, nothing is taken from the tape."""
    spec = SCRUB_SPEC.replace(
        'get_conf: {call: "MOD:get_conf"}', 'get_conf: {call: "MOD:get_conf", replay: safe}'
    )
    assert spec != SCRUB_SPEC
    same = replay(tmp_path / "same", scrubbed["yaml"], spec, replay_tools="safe")
    assert same.same, same.render()
    # a key too short for the guard, that golden files hide the same way: the text the
    # guard is shown reads as the golden's once redacted, and yet it does not fire on it
    tools = SCRUB_TOOLS.replace("sk-zyxwvutsrqponmlkjihgfedc", "sk-zyxwvutsrqponmlk")
    report = replay(tmp_path / "other", scrubbed["yaml"], spec, tools, replay_tools="safe")
    assert not report.same
    assert "- step 1 guard no-keys-in → redact (tool_result)" in report.render()


def _without_kept(golden: Path, folder: Path) -> Path:
    """`golden` as written before guard decisions kept `config`, `seen` and `left_text`."""
    lines = golden.read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if line.strip().split(":")[0] not in KEPT]
    assert len(lines) - len(kept) == 6
    old = folder / "old.yaml"
    old.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return old


def test_a_golden_written_before_the_keys_were_kept_loads_and_replays_as_before(
    scrubbed: dict[str, Path], tmp_path: Path
) -> None:
    old = _without_kept(scrubbed["yaml"], tmp_path)
    recording = ph.Recording.load(old)
    assert all(not set(KEPT) & set(d.detail) for d in recording.trace)
    report = replay(tmp_path / "app", old, SCRUB_SPEC)
    assert not report.same  # as before: the guards find nothing in the redacted text
    removed = {d.key for d in report.decisions if d.change == "removed"}
    assert removed == set(GUARDS)


def _scrub_with(guard: str) -> str:
    """The scrub desk with its output guard replaced by `guard` (a mapping's YAML lines)."""
    return SCRUB_SPEC.replace(NO_KEYS_OUT, guard)


OTHER_CHECKS = {
    "block": NO_KEYS_OUT.replace("action: redact", "action: block"),
    "contains": "  - id: no-keys-out\n    on: output\n    check: contains\n"
    "    text: sk-abcdefghij\n    action: redact\n",
    "cel": "  - id: no-keys-out\n    on: output\n    check: cel\n"
    '    when: \'text.matches("sk-[a-z]{20,}") && principal.id == "ann"\'\n    action: warn\n',
    "max_length": "  - id: no-keys-out\n    on: output\n    check: max_length\n"
    "    max: 30\n    action: redact\n",
}


@pytest.mark.parametrize("check", sorted(OTHER_CHECKS))
def test_other_built_in_checks_replay_same_on_an_unchanged_spec(check: str, tmp_path: Path) -> None:
    spec = _scrub_with(OTHER_CHECKS[check])
    paths = record(tmp_path, spec)
    detail = guard_details(paths["yaml"])["no-keys-out"]
    assert "seen" in detail, detail
    report = replay(tmp_path / "replay", paths["yaml"], spec)
    assert report.same, report.render()


def test_a_cel_guard_reading_a_changed_label_is_checked_again(tmp_path: Path) -> None:
    """A `cel` guard reads more than the text: today's labels are part of what it was shown."""
    guard = (
        "  - id: no-keys-out\n    on: output\n    check: cel\n"
        '    when: \'text.matches("sk-[a-z]{20,}") && labels.team == "desk"\'\n'
        "    action: warn\n"
    )
    spec = _scrub_with(guard).replace(
        "  desk: {prompt: p,", "  desk: {labels: {team: desk}, prompt: p,"
    )
    paths = record(tmp_path, spec)
    assert replay(tmp_path / "same", paths["yaml"], spec).same
    report = replay(tmp_path / "other", paths["yaml"], spec.replace("team: desk}", "team: ops}"))
    assert "- step 2 guard no-keys-out → warn (output)" in report.render()


CALLABLE_TOOLS = (
    SCRUB_TOOLS
    + '''

def scrub(text, context):
    """A guard of our own: Python code, which the replay cannot take on trust."""
    return text.replace("sk-zyxwvutsrqponmlkjihgfedc", "[KEY]") if "sk-zyx" in text else None
'''
)


def test_a_guard_of_python_code_and_those_after_it_keep_nothing(tmp_path: Path) -> None:
    """As before: a callable's decision is not taken from the golden, nor one after it."""
    guard = "  - id: own-scrub\n    on: tool_result\n    check: MOD:scrub\n    action: redact\n"
    spec = SCRUB_SPEC.replace("guards:\n", "guards:\n" + guard)
    paths = record(tmp_path, spec, CALLABLE_TOOLS)
    details = guard_details(paths["yaml"])
    assert not set(KEPT) & set(details["own-scrub"])
    assert "no-keys-in" not in details  # the callable took the key first
    assert "seen" in details["no-keys-out"]  # a guard on another text keeps its keys
    report = replay(tmp_path / "app", paths["yaml"], spec, CALLABLE_TOOLS)
    assert "- step 1 guard own-scrub → redact (tool_result)" in report.render()


# -- the golden file's schema ---------------------------------------------------------------


BAD = {
    "a digest that is not one": (
        lambda d: d | {"config": "sha256:nothex"},
        "trace[2].detail.config: expected a digest, 'sha256:' and 64 lowercase hex digits, "
        "got 'sha256:nothex'",
    ),
    "left_text that is not text": (
        lambda d: d | {"left_text": 5},
        "trace[2].detail.left_text: expected a string, got 5",
    ),
    "seen without config": (
        lambda d: {k: v for k, v in d.items() if k != "config"},
        "trace[2].detail: a guard decision keeps `config` and `seen` together",
    ),
    "a redaction without left_text": (
        lambda d: {k: v for k, v in d.items() if k != "left_text"},
        "trace[2].detail: a redact guard's kept decision holds `left_text`",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_kept_key_is_refused_naming_its_value_and_place(
    scrubbed: dict[str, Path], case: str, tmp_path: Path
) -> None:
    change, message = BAD[case]
    data = yaml.safe_load(scrubbed["yaml"].read_text(encoding="utf-8"))
    assert data["trace"][2]["key"] == "no-keys-in"
    data["trace"][2]["detail"] = change(data["trace"][2]["detail"])
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(ArchiveError) as raised:
        ph.Recording.load(path)
    assert f"{path}:" in str(raised.value) and message in str(raised.value)
    with pytest.raises(ArchiveError, match="its records do not make a recording") as checked:
        check_recording(data, "incident.hx")  # as an archive's recording is checked
    assert message in str(checked.value)


def test_the_kept_keys_of_another_kind_of_decision_are_not_checked(
    scrubbed: dict[str, Path], tmp_path: Path
) -> None:
    data = yaml.safe_load(scrubbed["yaml"].read_text(encoding="utf-8"))
    data["trace"][0]["detail"]["config"] = "anything"  # a model decision: the run's own data
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    assert ph.Recording.load(path).trace[0].detail["config"] == "anything"
