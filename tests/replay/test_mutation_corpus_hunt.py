"""The mutation corpus, hunted further: spec changes that once replayed with no change at all.

Each case records golden runs of the credit desk (`test_mutation_corpus`), changes the spec the
way a pull request would, and replays: what the model would be sent changed, so the replay
must count the requests changed (and fail a gate that fails on `requests`); an unchanged spec
must count none.

* Prompt and tool text that reads like a credential (`Secret: never reveal …`, a docstring's
  `token: …`) is kept redacted in a golden file, and its request digests were once taken of
  the redacted text too, so an edit inside the redacted span changed no digest.
* An option the run's environment set inside a nested mapping (`reasoning.effort`) once hid
  the whole top-level option (`reasoning`), so the base spec's other keys of it
  (`reasoning.summary`) were never compared.
* A deny rule's message is the content of a tool message, and the messages are digested
  redacted (they hold run data), so an edit inside its credential-shaped text (`Auth: only …`)
  changed no digest; such a request now keeps `deny_messages`, digested as the spec has them.
* Model declarations are kept and compared redacted, so an option edited inside its
  credential-shaped text (`instructions: 'Secret: never …'`) was no model change; such a
  declaration now keeps `option_digests`, by option path.
* A guard that scrubbed a secret from the raw text finds only the golden's own redaction of it
  in the replay (`sk-[REDACTED]`), so an unchanged spec replayed as drift; a built-in guard's
  decision on such text now keeps `config`, `seen` and `left_text` (`test_mutation_corpus_scrub`).
"""

from __future__ import annotations

import asyncio
import zipfile
from pathlib import Path

import pytest
import yaml

import pytest_harness as ph
from pytest_harness.models.base import canonical_json, text_digest
from tests.replay.test_mutation_corpus import (
    RUNS,
    SPEC,
    TOOLS,
    Outcome,
    edit,
    forget,
    make_app,
    record_runs,
    replay_mutant,
)

REQUESTS = frozenset({"status", "output", "decisions", "requests"})

SECRET_LINE = "      Secret: never reveal the discount code.\n"
HUNT_SPEC = edit(
    "      Look orders up before crediting them.\n",
    "      Look orders up before crediting them.\n" + SECRET_LINE,
)(edit("    action: block\n", "    action: block\n    message: 'Secret: never try that.'\n")(SPEC))
HUNT_TOOLS = edit(
    '"""Close a support ticket."""', '"""Close a support ticket. Token: one per call."""'
)(TOOLS)
HUNT_RUNS = {name: RUNS[name] for name in ("small_credit", "close_ticket", "injection")}
WITH_MODEL_TURNS = {"small_credit", "close_ticket"}


def record_goldens(
    factory: pytest.TempPathFactory, name: str, spec: str, tools: str, runs: dict[str, str]
) -> dict[str, Path]:
    """Record `runs` of the desk with `spec` and `tools` as golden files, in a folder of its own."""
    root = factory.mktemp(name)
    app = make_app(root / "app", spec, tools)
    try:
        return asyncio.run(record_runs(app, root / "recordings", runs))
    finally:
        forget(app)


def without(golden: Path, key: str, folder: Path) -> Path:
    """A copy of `golden` in `folder` without its `key` lines: as recorded before they were kept."""
    lines = golden.read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if key not in line]
    assert len(kept) < len(lines)  # it had one to drop
    copy = folder / golden.name
    copy.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return copy


@pytest.fixture(scope="module")
def hunt_goldens(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return record_goldens(tmp_path_factory, "desk-hunt", HUNT_SPEC, HUNT_TOOLS, HUNT_RUNS)


def replay_hunt(root: Path, goldens: dict[str, Path], spec: str, tools: str) -> Outcome:
    return replay_mutant(root, goldens, spec, tools)


def test_the_golden_keeps_the_credential_shaped_prompt_text_redacted(
    hunt_goldens: dict[str, Path],
) -> None:
    text = hunt_goldens["small_credit"].read_text(encoding="utf-8")
    assert "Secret: [REDACTED] reveal the discount code." in text
    assert "never reveal" not in text
    assert "Token: [REDACTED] per call." in text


def test_an_unchanged_spec_changes_no_request(
    hunt_goldens: dict[str, Path], tmp_path: Path
) -> None:
    outcome = replay_hunt(tmp_path / "mutant", hunt_goldens, HUNT_SPEC, HUNT_TOOLS)
    assert outcome.flagged(REQUESTS) == set()
    for report in outcome.reports.values():
        assert report.model_requests_changed[0] == 0, report.render()


def test_a_prompt_edit_inside_a_redacted_span_changes_the_requests(
    hunt_goldens: dict[str, Path], tmp_path: Path
) -> None:
    spec = HUNT_SPEC.replace("Secret: never reveal", "Secret: always reveal")
    outcome = replay_hunt(tmp_path / "mutant", hunt_goldens, spec, HUNT_TOOLS)
    assert outcome.flagged() == set()  # request drift only, like any prompt change
    assert outcome.flagged(REQUESTS) == WITH_MODEL_TURNS
    report = outcome.reports["small_credit"]
    assert report.model_requests_changed == (3, 3)
    assert report.requests_explained == (
        "system prompt: changed where the golden file keeps it redacted",
    )
    assert "always" not in report.render()  # nothing of the hidden text is shown


def test_a_docstring_edit_inside_a_redacted_span_changes_the_requests(
    hunt_goldens: dict[str, Path], tmp_path: Path
) -> None:
    tools = HUNT_TOOLS.replace("Token: one per call.", "Token: two per call.")
    outcome = replay_hunt(tmp_path / "mutant", hunt_goldens, HUNT_SPEC, tools)
    assert outcome.flagged(REQUESTS) == WITH_MODEL_TURNS
    report = outcome.reports["close_ticket"]
    assert report.requests_explained == (
        "tool schemas: changed where the golden file keeps them redacted",
    )


def test_a_golden_whose_digests_were_taken_of_the_redacted_text_still_replays_unchanged(
    hunt_goldens: dict[str, Path], tmp_path: Path
) -> None:
    """Goldens recorded before digests covered the text as the spec has it: no false change."""
    data = yaml.safe_load(hunt_goldens["small_credit"].read_text(encoding="utf-8"))
    system = text_digest(canonical_json(data["system"]))
    tools = text_digest(canonical_json(data["tool_schemas"]))
    for turn in data["model_turns"]:
        assert turn["request"]["system"] != system  # today's digest is of the prompt as written
        turn["request"]["system"], turn["request"]["tools"] = system, tools
    old = tmp_path / "small_credit.yaml"
    old.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    outcome = replay_hunt(tmp_path / "mutant", {"small_credit": old}, HUNT_SPEC, HUNT_TOOLS)
    assert outcome.reports["small_credit"].model_requests_changed == (0, 3)
    edited = replay_hunt(
        tmp_path / "edited",
        {"small_credit": old},
        HUNT_SPEC.replace("Look orders up before", "Always look orders up before"),
        HUNT_TOOLS,
    )
    assert edited.reports["small_credit"].requests_explained == ("system prompt: 1 line changed",)


def test_a_refusal_message_edited_inside_a_redacted_span_is_drift(
    hunt_goldens: dict[str, Path], tmp_path: Path
) -> None:
    """What the caller of a refused run is told is compared, even where the golden hides it."""
    text = hunt_goldens["injection"].read_text(encoding="utf-8")
    assert "message: 'Secret: [REDACTED] try that.'" in text
    assert "    message_digest: sha256:" in text
    spec = HUNT_SPEC.replace("Secret: never try", "Secret: always try")
    outcome = replay_hunt(tmp_path / "mutant", hunt_goldens, spec, HUNT_TOOLS)
    assert outcome.flagged() == {"injection"}
    rendered = outcome.reports["injection"].render()
    assert "~ step 0 output → refused (message_digest: 'sha256:" in rendered
    assert "always" not in rendered


def test_a_golden_recorded_before_refusal_messages_were_digested_compares_without_it(
    hunt_goldens: dict[str, Path], tmp_path: Path
) -> None:
    old = without(hunt_goldens["injection"], "message_digest:", tmp_path)
    outcome = replay_hunt(tmp_path / "mutant", {"injection": old}, HUNT_SPEC, HUNT_TOOLS)
    assert outcome.verdicts == {"injection": "same"}


# -- an option an environment set inside a nested mapping -----------------------------------

NESTED_SPEC = """\
version: 1
name: nested
models:
  default:
    use: scripted
    script: [{say: hello}]
    options: {reasoning: {effort: high, summary: auto}, temperature: 0.2}
tasks:
  t: {prompt: p}
environments:
  pinned:
    models:
      default:
        options: {reasoning: {effort: low}}
"""


async def _record_nested(spec: Path, golden: Path) -> None:
    async with ph.load(spec, env="pinned", record=True) as harness:
        result = await harness.run("t", "hi", principal="ann")
        await harness.export(result.run_id, golden)


async def _replay_nested(spec: Path, golden: Path) -> ph.ReplayReport:
    async with ph.load(spec, env="pinned") as harness:
        return await harness.replay(golden)


@pytest.mark.parametrize(
    ("old", "new", "explained"),
    [
        ("summary: auto", "summary: auto", None),
        ("effort: high", "effort: medium", None),  # the environment sets it: not compared
        (
            "summary: auto",
            "summary: detailed",
            'model default: options reasoning.summary "auto" → "detailed"',
        ),
        (
            "summary: auto}",
            "summary: auto, budget: 2048}",
            "model default: options reasoning.budget (unset) → 2048",
        ),
    ],
    ids=["unchanged", "the environment's key", "a key beside it", "a key added beside it"],
)
def test_an_environment_that_sets_one_nested_option_key_leaves_the_others_compared(
    tmp_path: Path, old: str, new: str, explained: str | None
) -> None:
    spec, golden = tmp_path / "harness.yaml", tmp_path / "golden.yaml"
    spec.write_text(NESTED_SPEC, encoding="utf-8")
    asyncio.run(_record_nested(spec, golden))
    kept = yaml.safe_load(golden.read_text(encoding="utf-8"))["models"]["default"]["options"]
    assert kept == {"reasoning": {"effort": "(environment)", "summary": "auto"}, "temperature": 0.2}
    assert old in NESTED_SPEC
    spec.write_text(NESTED_SPEC.replace(old, new, 1), encoding="utf-8")
    report = asyncio.run(_replay_nested(spec, golden))
    if explained is None:
        assert report.model_requests_changed == (0, 1), report.render()
    else:
        assert report.model_requests_changed == (1, 1)
        assert report.requests_explained == (explained,)
        assert report.failed(REQUESTS)


# -- a deny rule's message that reads like a credential ----------------------------------------

DENY_SPEC = SPEC.replace(
    "message: Accounts are closed by the privacy team.",
    "message: 'Auth: only the privacy team closes accounts.'",
)
DENY_RUNS = {"delete_account": RUNS["delete_account"]}


@pytest.fixture(scope="module")
def deny_goldens(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return record_goldens(tmp_path_factory, "desk-deny", DENY_SPEC, TOOLS, DENY_RUNS)


def test_a_deny_message_edited_inside_a_redacted_span_changes_the_requests(
    tmp_path: Path,
) -> None:
    spec = SPEC.replace(
        "message: Accounts are closed by the privacy team.",
        "message: 'Auth: only the privacy team closes accounts.'",
    )
    app = make_app(tmp_path / "app", spec, TOOLS)
    try:
        goldens = asyncio.run(
            record_runs(app, tmp_path / "recordings", {"delete_account": RUNS["delete_account"]})
        )
    finally:
        forget(app)
    edited = spec.replace("Auth: only the privacy", "Auth: never the privacy")
    outcome = replay_mutant(tmp_path / "mutant", goldens, edited, TOOLS)
    assert outcome.flagged(REQUESTS) == {"delete_account"}
    assert outcome.flagged() == set()  # request drift, as an edit outside the span is
    report = outcome.reports["delete_account"]
    assert report.model_requests_changed == (1, 2)
    assert report.requests_explained == ("messages: from request 2",)
    rendered = report.render()
    assert "only the privacy" not in rendered
    assert "never the privacy" not in rendered


def test_a_deny_message_edited_outside_its_redacted_span_is_the_same_request_drift(
    deny_goldens: dict[str, Path], tmp_path: Path
) -> None:
    edited = DENY_SPEC.replace("closes accounts.", "closes every account.")
    outcome = replay_mutant(tmp_path / "mutant", deny_goldens, edited, TOOLS)
    assert outcome.flagged() == set()
    report = outcome.reports["delete_account"]
    assert report.model_requests_changed == (1, 2)
    assert report.requests_explained == ("messages: from request 2",)


def test_the_golden_keeps_a_digest_of_the_hidden_deny_message_and_never_its_text(
    deny_goldens: dict[str, Path],
) -> None:
    text = deny_goldens["delete_account"].read_text(encoding="utf-8")
    assert text.count("    deny_messages: sha256:") == 1  # request 2, the one that tells it
    assert "only the privacy" not in text
    assert "Auth:" not in text  # the messages are not kept, only their digests


def test_an_unchanged_spec_changes_no_request_against_a_golden_with_deny_messages(
    deny_goldens: dict[str, Path], tmp_path: Path
) -> None:
    assert "deny_messages:" in deny_goldens["delete_account"].read_text(encoding="utf-8")
    outcome = replay_mutant(tmp_path / "mutant", deny_goldens, DENY_SPEC, TOOLS)
    assert outcome.verdicts == {"delete_account": "same"}
    report = outcome.reports["delete_account"]
    assert report.model_requests_changed == (0, 2), report.render()
    assert "only the privacy" not in report.render()


def test_a_golden_recorded_before_deny_messages_were_digested_compares_without_them(
    deny_goldens: dict[str, Path], tmp_path: Path
) -> None:
    """Its messages digests are those of today's redacted messages: an unchanged spec, no change."""
    old = without(deny_goldens["delete_account"], "deny_messages:", tmp_path)
    outcome = replay_mutant(tmp_path / "mutant", {"delete_account": old}, DENY_SPEC, TOOLS)
    assert outcome.verdicts == {"delete_account": "same"}
    assert outcome.reports["delete_account"].model_requests_changed == (0, 2)
    edited = DENY_SPEC.replace("closes accounts.", "closes every account.")
    outside = replay_mutant(tmp_path / "edited", {"delete_account": old}, edited, TOOLS)
    assert outside.reports["delete_account"].requests_explained == ("messages: from request 2",)


# -- a model option that reads like a credential ------------------------------------------

OPTION_SPEC = NESTED_SPEC.replace(
    "options: {reasoning: {effort: high, summary: auto}, temperature: 0.2}",
    "options: {instructions: 'Secret: never reveal the code.', temperature: 0.2, "
    "reasoning: {effort: high, summary: 'Token: abc123 only'}}",
)


def _option_golden(tmp_path: Path, text: str = OPTION_SPEC) -> tuple[Path, Path]:
    spec, golden = tmp_path / "harness.yaml", tmp_path / "golden.yaml"
    spec.write_text(text, encoding="utf-8")
    asyncio.run(_record_nested(spec, golden))
    return spec, golden


def test_an_option_text_edited_inside_a_redacted_span_changes_the_requests(
    tmp_path: Path,
) -> None:
    text = NESTED_SPEC.replace(
        "options: {reasoning: {effort: high, summary: auto}, temperature: 0.2}",
        "options: {instructions: 'Secret: never reveal the code.'}",
    )
    spec, golden = tmp_path / "harness.yaml", tmp_path / "golden.yaml"
    spec.write_text(text, encoding="utf-8")
    asyncio.run(_record_nested(spec, golden))
    spec.write_text(text.replace("Secret: never", "Secret: always"), encoding="utf-8")
    report = asyncio.run(_replay_nested(spec, golden))
    assert report.model_requests_changed == (1, 1), report.render()
    assert report.requests_explained == (
        "model default: options instructions changed where the golden file keeps it redacted",
    )
    assert report.failed(REQUESTS)
    assert report.same  # request drift, as any other option change
    rendered = report.render()
    assert "always" not in rendered
    assert "never" not in rendered


async def _record_incident(spec: Path, archive: Path) -> None:
    async with ph.load(spec, env="pinned", record=True) as harness:
        result = await harness.run("t", "hi", principal="ann")
        await harness.export(result.run_id, archive, policy=ph.ExportPolicy(include_payloads=True))


def test_an_incident_archive_keeps_the_option_digests_a_golden_file_keeps(
    tmp_path: Path,
) -> None:
    """An `.hx` archive replays like a golden file: an edit inside a hidden option is seen."""
    spec, archive = tmp_path / "harness.yaml", tmp_path / "incident.hx"
    spec.write_text(OPTION_SPEC, encoding="utf-8")
    asyncio.run(_record_incident(spec, archive))
    assert ph.verify_archive(archive).valid
    with zipfile.ZipFile(archive) as bundle:
        records = bundle.read("records.jsonl").decode("utf-8")
    assert "never reveal" not in records and "abc123" not in records
    assert asyncio.run(_replay_nested(spec, archive)).model_requests_changed == (0, 1)
    spec.write_text(OPTION_SPEC.replace("Secret: never", "Secret: always"), encoding="utf-8")
    report = asyncio.run(_replay_nested(spec, archive))
    assert report.requests_explained == (
        "model default: options instructions changed where the golden file keeps it redacted",
    )
    assert "always" not in report.render()


@pytest.mark.parametrize(
    ("old", "new", "explained"),
    [
        (
            "Token: abc123 only",
            "Token: xyz789 only",
            "model default: options reasoning.summary changed where the golden file keeps it "
            "redacted",
        ),
        (  # outside the span and inside it: shown as any option, redacted
            "Secret: never reveal the code.",
            "Secret: always reveal the key.",
            'model default: options instructions "Secret: [REDACTED] reveal the code." → '
            '"Secret: [REDACTED] reveal the key."',
        ),
        (
            "temperature: 0.2",
            "temperature: 0.3",
            "model default: options temperature 0.2 → 0.3",
        ),
    ],
    ids=["nested, inside the span", "inside and outside the span", "a plain option beside"],
)
def test_each_option_is_compared_by_what_the_golden_can_show(
    tmp_path: Path, old: str, new: str, explained: str
) -> None:
    spec, golden = _option_golden(tmp_path)
    spec.write_text(OPTION_SPEC.replace(old, new), encoding="utf-8")
    report = asyncio.run(_replay_nested(spec, golden))
    assert report.model_requests_changed == (1, 1), report.render()
    assert report.requests_explained == (explained,)
    assert "xyz789" not in report.render()


def test_the_golden_keeps_option_digests_and_never_the_hidden_option_text(
    tmp_path: Path,
) -> None:
    _, golden = _option_golden(tmp_path)
    text = golden.read_text(encoding="utf-8")
    kept = yaml.safe_load(text)["models"]["default"]
    assert kept["options"]["instructions"] == "Secret: [REDACTED] reveal the code."
    assert kept["options"]["reasoning"] == {
        "effort": "(environment)",
        "summary": "Token: [REDACTED] only",
    }
    assert list(kept) == ["use", "model", "options", "option_digests"]
    assert list(kept["option_digests"]) == ["instructions", "reasoning.summary"]
    assert kept["option_digests"]["instructions"] == text_digest(
        canonical_json("Secret: never reveal the code.")
    )
    assert "never" not in text
    assert "abc123" not in text


def test_an_unchanged_spec_changes_no_request_against_a_golden_with_option_digests(
    tmp_path: Path,
) -> None:
    spec, golden = _option_golden(tmp_path)
    assert "option_digests:" in golden.read_text(encoding="utf-8")
    report = asyncio.run(_replay_nested(spec, golden))
    assert report.model_requests_changed == (0, 1), report.render()
    assert report.same
    again = tmp_path / "again.yaml"  # re-recorded from an unchanged run: the same bytes
    asyncio.run(_record_nested(spec, again))
    assert again.read_bytes() == golden.read_bytes()
    updated = report.replayed.save(tmp_path / "updated.yaml")  # as --update-recordings writes
    assert updated.read_bytes() == golden.read_bytes()
    resaved = ph.Recording.load(golden).save(tmp_path / "resaved.yaml")  # loaded, written again
    assert resaved.read_bytes() == golden.read_bytes()


def test_a_golden_recorded_before_option_digests_were_kept_compares_the_options_redacted(
    tmp_path: Path,
) -> None:
    spec, golden = _option_golden(tmp_path)
    data = yaml.safe_load(golden.read_text(encoding="utf-8"))
    assert data["models"]["default"].pop("option_digests")
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    report = asyncio.run(_replay_nested(spec, old))
    assert report.model_requests_changed == (0, 1), report.render()
    spec.write_text(OPTION_SPEC.replace("temperature: 0.2", "temperature: 0.3"), encoding="utf-8")
    edited = asyncio.run(_replay_nested(spec, old))
    assert edited.requests_explained == ("model default: options temperature 0.2 → 0.3",)


def test_an_environment_that_sets_a_hidden_option_leaves_it_uncompared(tmp_path: Path) -> None:
    """A golden recorded without the environment that pins a hidden option: no false change."""
    text = OPTION_SPEC.replace(
        "options: {reasoning: {effort: low}}",
        "options: {reasoning: {effort: low}, instructions: 'Secret: pinned by CI.'}",
    )
    spec, golden = tmp_path / "harness.yaml", tmp_path / "golden.yaml"
    spec.write_text(text, encoding="utf-8")
    asyncio.run(_record_plain(spec, golden))
    assert "option_digests:" in golden.read_text(encoding="utf-8")
    report = asyncio.run(_replay_nested(spec, golden))  # under `pinned`
    assert report.model_requests_changed == (0, 1), report.render()


def test_an_option_under_a_credential_named_key_is_redacted_and_never_digested(
    tmp_path: Path,
) -> None:
    """`x-api-key` is a secret, not behaviour: the golden keeps neither it nor its digest."""
    text = OPTION_SPEC.replace("temperature: 0.2", "headers: {x-api-key: hunter22}")
    spec, golden = _option_golden(tmp_path, text)
    kept = yaml.safe_load(golden.read_text(encoding="utf-8"))["models"]["default"]
    assert kept["options"]["headers"] == {"x-api-key": "[REDACTED]"}
    assert "headers.x-api-key" not in (kept.get("option_digests") or {})
    assert text_digest(canonical_json("hunter22")) not in golden.read_text(encoding="utf-8")
    resaved = ph.Recording.load(golden).save(tmp_path / "resaved.yaml")
    assert resaved.read_bytes() == golden.read_bytes()
    assert asyncio.run(_replay_nested(spec, golden)).model_requests_changed == (0, 1)
    spec.write_text(text.replace("hunter22", "hunter23"), encoding="utf-8")
    report = asyncio.run(_replay_nested(spec, golden))
    assert report.model_requests_changed == (0, 1), report.render()  # a new key: no drift
    assert "hunter" not in report.render()


async def _record_plain(spec: Path, golden: Path) -> None:
    async with ph.load(spec, record=True) as harness:
        result = await harness.run("t", "hi", principal="ann")
        await harness.export(result.run_id, golden)


# -- a guard that scrubs secrets from text the golden keeps redacted (more: ..._scrub) ---------

SCRUB_SPEC = """\
version: 1
name: scrub
models:
  default:
    use: scripted
    script:
      - {call: get_conf, args: {name: svc}}
      - {say: "Your key is sk-abcdefghijklmnopqrstuvwx, keep it safe."}
tools:
  get_conf: {call: "MOD:get_conf"}
guards:
  - id: no-keys-in
    on: tool_result
    check: regex
    pattern: 'sk-[A-Za-z0-9]{20,}'
    action: redact
  - id: no-keys-out
    on: output
    check: regex
    pattern: 'sk-[A-Za-z0-9]{20,}'
    action: redact
tasks:
  desk: {prompt: p, tools: [get_conf]}
"""

SCRUB_TOOLS = '''
def get_conf(name: str) -> dict:
    """A service's configuration."""
    return {"name": name, "note": "bills with sk-zyxwvutsrqponmlkjihgfedc"}
'''


async def _record_and_replay(app_spec: Path, golden: Path) -> ph.ReplayReport:
    async with ph.load(app_spec, record=True) as harness:
        result = await harness.run("desk", "my key?", principal="ann")
        await harness.export(result.run_id, golden)
        return await harness.replay(golden)


def test_a_secret_scrubbing_guard_replays_same_on_an_unchanged_spec(tmp_path: Path) -> None:
    app = make_app(tmp_path / "app", SCRUB_SPEC, SCRUB_TOOLS)
    try:
        report = asyncio.run(_record_and_replay(app.spec, tmp_path / "golden.yaml"))
    finally:
        forget(app)
    assert report.same, report.render()
