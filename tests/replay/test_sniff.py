"""`not_a_recording`: a model script kept beside the recordings, in either of its two shapes."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_harness.cli import main
from pytest_harness.models.scripted import parse_script
from pytest_harness.recording.sniff import not_a_recording
from pytest_harness.spec.yamlio import read_yaml

SHOP = Path(__file__).parent.parent.parent / "fixtures" / "shop"

MATCH_SCRIPT = """\
match:
  - input: "Where is*"
    turns:
      - {call: lookup_order, args: {order_id: A-1}}
      - say: Delivered.
  - task: orders
    turns: [{say: hi}]
  - turns: []
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "file.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_shops_offline_script_in_its_match_form_is_a_model_script() -> None:
    path = SHOP / "scripts" / "offline.yaml"
    parse_script(read_yaml(path).data)  # the loader takes it as a script
    assert not_a_recording(path) == "a model script"


@pytest.mark.parametrize(
    "text",
    [MATCH_SCRIPT, "- say: hi\n- call: refund\n  args: {amount: 5}\n"],
    ids=["match", "list"],
)
def test_both_shapes_the_script_loader_takes_are_a_model_script(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    parse_script(read_yaml(path).data)
    assert not_a_recording(path) == "a model script"


@pytest.mark.parametrize(
    "text",
    [
        "match: []\n",  # nothing in it says script
        "match: {input: x, turns: [{say: hi}]}\n",  # `match` is a list
        "match:\n  - input: x\n",  # an entry without `turns`
        "match:\n  - input: x\n    turns: [{say: hi}]\n    when: later\n",  # unknown entry key
        "match:\n  - turns: {say: hi}\n",  # turns is a list
        "match:\n  - turns: [{say: hi, speak: up}]\n",  # unknown turn key
        "match:\n  - turns: [{say: hi}]\nnotes: x\n",  # a script mapping has only `match`
        "match:\n  - turns: [{say: hi}]\noutcome: {status: completed}\n",  # a recording's key
        "format: pytest-harness/recording@2\nmatch:\n  - turns: [{say: hi}]\n",  # the format
    ],
)
def test_what_is_not_plainly_a_match_script_stays_a_recording(tmp_path: Path, text: str) -> None:
    assert not_a_recording(write(tmp_path, text)) is None


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    app = tmp_path / "shop"
    shutil.copytree(SHOP, app, ignore=shutil.ignore_patterns(".harness", "__pycache__"))
    monkeypatch.chdir(app)
    for name in ("HARNESS_ENV", "HARNESS_SPEC", "FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    yield app
    sys.modules.pop("shop_tools", None)
    while str(app) in sys.path:
        sys.path.remove(str(app))


def test_replaying_the_shops_folder_passes_over_its_match_script(
    shop: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["replay", ".", "harness.yaml", "-e", "offline"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "skipped scripts/offline.yaml: a model script, not a recording" in out.splitlines()
    assert "not loaded" not in out
