"""Redaction with no gaps: every secret shape, in every field, in every place that leaves the store.

A recorded app plants secrets everywhere a run keeps text: the input, a tool's arguments, the
tool's result (credential keys in every casing, JSON inside a string), the approval's reason,
the model's answer, and (in a second run) the error message. Each place that leaves the store
is then read as a person or a tool would: the golden file, the `.yaml` export, the `.hx`
archive exported with payloads (every member), `show`,
`replay --json`, and the replay report (`to_dict()` and `render()`). No secret may appear in
any of them, and each place must show the redaction marker (so it did show the field).

Run with `-s` to see the matrix (shapes by places).
"""

from __future__ import annotations

import json
import sys
import textwrap
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import pytest_harness as ph
from pytest_harness.cli import main
from pytest_harness.recording.model import Recording

SHAPES: dict[str, tuple[str, str]] = {
    # shape: (how it is planted in free text, the part that must never leave the store)
    "Authorization: Bearer": ("Authorization: Bearer tok3nBearerV4lue99", "tok3nBearerV4lue99"),
    "sk- key": ("sk-proj-OPENAIkeyV4lueABCDEFGHIJ123", "OPENAIkeyV4lueABCDEFGHIJ123"),
    "sk-ant- key": ("sk-ant-api03-ANTHROPICkeyV4lueXYZ12", "ANTHROPICkeyV4lueXYZ12"),
    "ghp_ token": ("ghp_GITHUBtokenV4lue0123456789abcdef", "GITHUBtokenV4lue0123456789abcdef"),
    "AWS access key id": ("AKIAQWERTYUIOPASDFGH", "QWERTYUIOPASDFGH"),
    "URL credentials": ("postgresql://app:dbPassV4lue77@db:5432/shop", "dbPassV4lue77"),
    "password= pair": ("password=pairV4lue55", "pairV4lue55"),
    "JSON in text": ('cfg {"apiKey": "jsonTextV4lue31"}', "jsonTextV4lue31"),
}
KEYS = {
    # a credential key in one casing: its value must never leave the store
    "clientSecret": "clientSecretV4lue01",
    "accessToken": "accessTokenV4lue02",
    "refreshToken": "refreshTokenV4lue03",
    "secretKey": "secretKeyV4lue04",
    "sessionToken": "sessionTokenV4lue05",
    "authToken": "authTokenV4lue06",
    "x-api-key": "xApiKeyV4lue07",
    "client_secret": "clientSnakeV4lue08",
    "Private-Key": "privateKebabV4lue09",
}
NESTED = "nestedJsonV4lue10"
"""Under `refreshToken` in a JSON document held in a string of the tool's result."""

FREE_TEXT = " | ".join(planted for planted, _ in SHAPES.values())

APP = textwrap.dedent(
    f'''
    import json
    from pytest_harness.models.base import ModelResponse, ProposedCall, TokenUsage

    FREE_TEXT = {FREE_TEXT!r}
    KEYS = {KEYS!r}


    def model(request):
        if request.input.startswith("fail"):
            raise RuntimeError("the upstream said: " + FREE_TEXT)
        last = request.messages[-1]
        if last["role"] == "tool":
            return ModelResponse(text="Done. " + FREE_TEXT, usage=TokenUsage(5, 5))
        args = {{"note": FREE_TEXT, "accessToken": KEYS["accessToken"]}}
        call = ProposedCall("c1", "vault", args)
        return ModelResponse(calls=(call,), usage=TokenUsage(5, 5))


    def vault(note: str, accessToken: str) -> dict:
        """Reads the vault."""
        return {{
            **KEYS,
            "echo": note,
            "raw": json.dumps({{"refreshToken": {NESTED!r}, "n": 1}}),
        }}
    '''
)

SPEC = """
version: 1
name: secrets
models:
  default: {{use: function, call: "{mod}:model", retries: 0}}
tools:
  vault: {{call: "{mod}:vault", replay: safe}}
rules:
  - {{id: R1, when: 'tool == "vault"', then: approve, approvers: [finance]}}
tasks:
  t: {{prompt: p, tools: [vault]}}
state: {{use: sqlite, path: state.db, record: true}}
"""

SECRETS = {**{shape: part for shape, (_, part) in SHAPES.items()}, **KEYS}
SECRETS["JSON in a string"] = NESTED


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    name = f"secrets_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{name}.py").write_text(APP, encoding="utf-8")
    spec = tmp_path / "harness.yaml"
    spec.write_text(SPEC.format(mod=name), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", "400")
    yield spec
    sys.modules.pop(name, None)
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


async def make_runs(spec: Path) -> tuple[str, str]:
    async with ph.load(spec) as harness:
        waiting = await harness.run("t", "Please look. " + FREE_TEXT, principal="ann")
        assert waiting.approval is not None, waiting
        fiona = ph.Principal("fiona", ("finance",))
        done = await harness.approve(
            waiting.run_id,
            waiting.approval.approval_id,
            "approve",
            approver=fiona,
            reason="checked with " + FREE_TEXT,
        )
        assert done.ok, done
        failed = await harness.run("t", "fail " + FREE_TEXT, principal="ann")
        assert failed.status is ph.RunStatus.FAILED
        return done.run_id, failed.run_id


def places(
    spec: Path, tmp: Path, done: str, failed: str, capsys: pytest.CaptureFixture[str]
) -> dict[str, str]:
    import asyncio

    async def api() -> dict[str, str]:
        async with ph.load(spec) as harness:
            golden = await Recording.from_store(harness.store, done)
            golden_failed = await Recording.from_store(harness.store, failed)
            texts = {
                "golden file": golden.save(tmp / "golden.yaml").read_text(encoding="utf-8")
                + golden_failed.save(tmp / "golden-failed.yaml").read_text(encoding="utf-8"),
                "export": (await harness.export(done, tmp / "export.yaml")).read_text(
                    encoding="utf-8"
                ),
            }
            policy = ph.ExportPolicy(include_payloads=True)
            archived = []
            for run_id, name in ((done, "done.hx"), (failed, "failed.hx")):
                path = await harness.export(run_id, tmp / name, policy=policy)
                with zipfile.ZipFile(path) as archive:
                    archived += [archive.read(m).decode("utf-8") for m in archive.namelist()]
            texts["archive (.hx)"] = "\n".join(archived)
            report = await harness.replay(done)
            texts["report"] = json.dumps(report.to_dict()) + report.render()
            return texts

    texts = asyncio.run(api())
    shown = []
    for run_id in (done, failed):
        assert main(["show", run_id, str(spec)]) == 0
        shown.append(capsys.readouterr().out)
    texts["show"] = "\n".join(shown)
    assert main(["replay", done, str(spec), "--json"]) == 0
    texts["replay --json"] = capsys.readouterr().out
    return texts


def test_no_secret_leaves_the_store(
    app: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    done, failed = asyncio.run(make_runs(app))
    texts = places(app, tmp_path, done, failed, capsys)
    leaks = {
        (shape, place)
        for place, text in texts.items()
        for shape, secret in SECRETS.items()
        if secret in text
    }
    width = max(len(s) for s in SECRETS) + 2
    lines = ["shape".ljust(width) + "".join(p.ljust(15) for p in texts)]
    for shape in SECRETS:
        cells = ("LEAKED" if (shape, place) in leaks else "redacted" for place in texts)
        lines.append(shape.ljust(width) + "".join(c.ljust(15) for c in cells))
    print("\n" + "\n".join(lines))
    assert not leaks, "\n".join(lines)
    for place, text in texts.items():
        assert "[REDACTED]" in text, f"{place} shows no redaction at all:\n{text}"
    # What each place must show, redacted, keeping the label:
    golden = texts["golden file"]
    assert "Authorization: Bearer [REDACTED]" in golden
    assert "postgresql://app:[REDACTED]@db:5432/shop" in golden
    assert "sk-ant-api03-[REDACTED]" in golden and "password=[REDACTED]" in golden
    for part in ("input: 'Please look.", "reason: 'checked with", "the upstream said:"):
        assert part in golden, part  # the input, the approval's reason, the run's error
    assert "the upstream said: Authorization: Bearer [REDACTED]" in texts["show"]


def test_a_redacted_golden_file_replays_the_same(app: Path, tmp_path: Path) -> None:
    import asyncio

    done, _ = asyncio.run(make_runs(app))

    async def check() -> None:
        async with ph.load(app) as harness:
            path = (await Recording.from_store(harness.store, done)).save(tmp_path / "g.yaml")
            report = await harness.replay(path)
            assert report.same, report.render()

    asyncio.run(check())
