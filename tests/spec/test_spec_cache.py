"""The spec cache (`spec.cache`): a checked spec kept as JSON, never stale, never hiding an error.

Each test loads a spec from its files first (which writes the entry), then loads it again and
checks that the second load either took the entry (equal spec) or, when anything it depends on
changed, checked the files again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest_harness
from pytest_harness.errors import SpecError
from pytest_harness.spec import cache as spec_cache
from pytest_harness.spec.loader import load_spec
from pytest_harness.spec.spec import Spec

SPEC = textwrap.dedent(
    """\
    version: 1
    name: cache-test
    baseline: org.yaml

    models:
      default:
        use: scripted
        script: turns.yaml
        price: {input_per_mtok: 0.4, output_per_mtok: 1.6}
        options: {temperature: 0, stop: ["\\n"], nested: {a: [1, 2.5, true, null]}}

    tools:
      lookup_order:
        call: cache_test_shop:lookup_order
        replay: safe
        timeout: 20s

    rules:
      - id: R1
        when: tool == "lookup_order" && args.order_id == "A-1"
        then: approve
        approvers: [finance]

    guards:
      - id: G1
        on: output
        check: cel
        when: text.size() > 1000
        action: warn
      - id: G2
        on: output
        check: regex
        pattern: '\\b\\d{16}\\b'
        action: redact

    tasks:
      orders:
        prompt: Be brief.
        tools: [lookup_order]
        budget: {steps: 8, usd: 0.5}
        deadline: 60s
        labels: {team: desk}

    state:
      lease: 30s

    evals:
      online:
        sample: 0.5
        graders:
          - id: short
            check: cel
            when: text.size() < 500

    environments:
      offline:
        models:
          default:
            retries: 0
    """
)

BASELINE = textwrap.dedent(
    """\
    locks:
      state.record: false
    rules:
      - id: B1
        when: tool == "delete_account"
        then: deny
    """
)

SCRIPT = "- say: first answer\n"

SHOP = "def lookup_order(order_id: str) -> dict:\n    return {'order_id': order_id}\n"


@pytest.fixture(autouse=True)
def _app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_ENV", raising=False)
    monkeypatch.delenv(spec_cache.DISABLE, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "harness.yaml").write_text(SPEC, encoding="utf-8")
    (tmp_path / "org.yaml").write_text(BASELINE, encoding="utf-8")
    (tmp_path / "turns.yaml").write_text(SCRIPT, encoding="utf-8")
    (tmp_path / "cache_test_shop.py").write_text(SHOP, encoding="utf-8")


def entries(pattern: str = "harness-*.json") -> list[Path]:
    """The spec's entries (or those matching `pattern`) in the cache folder."""
    folder = Path.cwd() / ".harness" / "cache"
    return sorted(folder.glob(pattern)) if folder.is_dir() else []


def fresh(**kwargs: object) -> Spec:
    """The spec checked from its files, the cache turned off."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(spec_cache.DISABLE, "1")
        return load_spec("harness.yaml", **kwargs)  # type: ignore[arg-type]


def assert_same(a: Spec, b: Spec) -> None:
    assert a.document == b.document
    assert (a.path, a.env, a.digest, a.baseline_path) == (b.path, b.env, b.digest, b.baseline_path)
    assert dict(a.locations) == dict(b.locations)
    assert (a.baseline_rules, a.baseline_guards) == (b.baseline_rules, b.baseline_guards)
    for name in ("rule_programs", "guard_programs", "grader_programs"):
        mine, theirs = getattr(a, name), getattr(b, name)
        assert list(mine) == list(theirs)
        for key in mine:
            assert mine[key].variables == theirs[key].variables


def test_the_first_load_writes_an_entry_the_second_takes() -> None:
    first = load_spec("harness.yaml")
    [entry] = entries()
    assert entry.parent == Path.cwd() / ".harness" / "cache"
    assert entry.name.startswith("harness-")
    second = load_spec("harness.yaml")
    assert type(second.rule_programs).__name__ == "LazyPrograms"  # it came from the entry
    assert_same(second, first)
    assert_same(second, fresh())


def test_a_cached_program_evaluates_as_the_compiled_one() -> None:
    first = load_spec("harness.yaml")
    second = load_spec("harness.yaml")
    call = {"tool": "lookup_order", "args": {"order_id": "A-1"}, "task": "orders"}
    variables = {**call, "principal": {}, "step": 1, "spent": {}, "labels": {}}
    assert second.rule_programs["R1"].evaluate(variables) is True
    assert first.rule_programs["R1"].evaluate(variables) is True


def test_a_fresh_process_with_an_entry_imports_no_pydantic_yaml_cel_or_checker() -> None:
    """A hit imports none of what checks a spec: not pydantic, yaml or cel, nor the modules of
    `spec.build`'s steps (#13)."""
    load_spec("harness.yaml")
    checkers = ("build", "baseline", "checks", "validation", "where", "yamlio", "yamllines")
    probe = (
        "import sys\n"
        "from pytest_harness.spec.loader import load_spec\n"
        "spec = load_spec('harness.yaml')\n"
        "assert type(spec.rule_programs).__name__ == 'LazyPrograms', 'not from the cache'\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'yaml', 'cel'}))\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[-1] in {checkers!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split("\n")[:2] == ["[]", "[]"]


def test_each_environment_and_record_setting_has_its_own_entry() -> None:
    load_spec("harness.yaml")
    load_spec("harness.yaml", env="offline")
    load_spec("harness.yaml", record=False)
    assert len(entries()) == 3
    offline = load_spec("harness.yaml", env="offline")
    assert offline.env == "offline"
    assert offline.document.models["default"].retries == 0
    assert load_spec("harness.yaml").document.models["default"].retries == 2


def test_harness_env_picks_the_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    load_spec("harness.yaml")
    monkeypatch.setenv("HARNESS_ENV", "offline")
    assert load_spec("harness.yaml").env == "offline"
    monkeypatch.setenv("HARNESS_ENV", "nowhere")
    with pytest.raises(SpecError, match="unknown environment 'nowhere'"):
        load_spec("harness.yaml")


def test_an_edited_spec_is_checked_again_and_its_error_raised() -> None:
    load_spec("harness.yaml")
    bad = SPEC.replace("tools: [lookup_order]", "tools: [lookup_ordr]")
    Path("harness.yaml").write_text(bad, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_spec("harness.yaml")
    line = bad.splitlines().index("    tools: [lookup_ordr]") + 1
    assert str(info.value).startswith(f"harness.yaml:{line} tasks.orders.tools[0]: ")
    assert "unknown tool 'lookup_ordr' (did you mean 'lookup_order'?)" in str(info.value)
    Path("harness.yaml").write_text(SPEC.replace("Be brief.", "Be kind."), encoding="utf-8")
    assert load_spec("harness.yaml").document.tasks["orders"].prompt == "Be kind."


def test_an_edited_baseline_is_checked_again() -> None:
    load_spec("harness.yaml")
    Path("org.yaml").write_text(BASELINE.replace("state.record: false", "state.lease: 5s"))
    with pytest.raises(SpecError, match=r"org\.yaml \(locks\.state\.lease\)"):
        load_spec("harness.yaml")
    Path("org.yaml").write_text(BASELINE.replace("delete_account", "drop_table"))
    spec = load_spec("harness.yaml")
    assert spec.baseline_rules[0].when == 'tool == "drop_table"'
    assert_same(spec, fresh())


def test_a_removed_baseline_is_an_error_again() -> None:
    load_spec("harness.yaml")
    Path("org.yaml").unlink()
    with pytest.raises(SpecError, match="baseline file not found"):
        load_spec("harness.yaml")


@pytest.mark.asyncio
async def test_an_edited_script_file_is_read_again() -> None:
    """The script's data is cached apart from the spec, keyed by the script file's bytes."""
    for answer in ("first answer", "second answer"):
        Path("turns.yaml").write_text(f"- say: {answer}\n", encoding="utf-8")
        async with pytest_harness.load("harness.yaml") as harness:
            result = await harness.run("orders", "hello", principal="ann")
        assert result.output == answer
    assert len(entries()) == 1
    assert len(data_entries()) == 1


def test_a_spec_with_an_error_is_never_written() -> None:
    Path("harness.yaml").write_text(SPEC.replace("then: approve", "then: aprove"))
    with pytest.raises(SpecError):
        load_spec("harness.yaml")
    assert entries() == []


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda raw: raw[: len(raw) // 2], id="truncated"),
        pytest.param(lambda raw: b"", id="empty"),
        pytest.param(lambda raw: raw.replace(b"Be brief.", b"Be quick."), id="edited"),
        pytest.param(lambda raw: b"\x00\xff" * 100, id="garbage"),
    ],
)
def test_a_damaged_entry_is_ignored_and_written_again(damage: object) -> None:
    load_spec("harness.yaml")
    [entry] = entries()
    good = entry.read_bytes()
    entry.write_bytes(damage(good))  # type: ignore[operator]
    spec = load_spec("harness.yaml")
    assert type(spec.rule_programs).__name__ != "LazyPrograms"  # checked from the files
    assert spec.document.tasks["orders"].prompt == "Be brief."
    assert entry.read_bytes() == good


def test_an_entry_of_another_version_or_other_plugins_is_a_miss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = Path.cwd() / "harness.yaml"
    load_spec("harness.yaml")
    assert spec_cache.read(path, None, None) is not None
    with monkeypatch.context() as mp:
        mp.setattr(pytest_harness, "__version__", "99.0")
        assert spec_cache.read(path, None, None) is None
    names = spec_cache._plugin_names()
    monkeypatch.setattr(
        spec_cache,
        "_plugin_names",
        lambda: {**names, "harness_stores": [s for s in names["harness_stores"] if s != "sqlite"]},
    )
    assert spec_cache.read(path, None, None) is None


def test_the_installed_cel_is_in_the_key_and_a_changed_library_is_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stamp = spec_cache.code_stamp()
    [cel] = [part for part in stamp if part[0] == "cel"]
    assert any(str(name).endswith(".so") or str(name).endswith(".pyd") for name, *_ in cel[1:])
    # a stand-in library, so the test changes no installed file
    lib = tmp_path / "libs" / "stand_in_cel"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("", encoding="utf-8")
    (lib / "core.py").write_text("X = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "libs"))
    monkeypatch.setattr(spec_cache, "_LIBRARIES", ("cel", "stand_in_cel"))
    path = Path.cwd() / "harness.yaml"
    load_spec("harness.yaml")
    assert spec_cache.read(path, None, None) is not None
    info = (lib / "core.py").stat()
    os.utime(lib / "core.py", ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))
    assert spec_cache.read(path, None, None) is None  # an upgrade of the library: a miss
    load_spec("harness.yaml")
    assert spec_cache.read(path, None, None) is not None


def test_the_switch_turns_the_cache_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(spec_cache.DISABLE, "1")
    load_spec("harness.yaml")
    assert entries() == []
    monkeypatch.setenv(spec_cache.DISABLE, "0")
    load_spec("harness.yaml")
    [entry] = entries()
    entry.write_bytes(b"not an entry")
    monkeypatch.setenv(spec_cache.DISABLE, "1")
    load_spec("harness.yaml")
    assert entry.read_bytes() == b"not an entry"  # neither read nor written


def test_an_unwritable_folder_is_skipped(tmp_path: Path) -> None:
    (tmp_path / ".harness").write_text("a file where the folder would be")
    spec = load_spec("harness.yaml")
    assert spec.name == "cache-test"
    assert entries() == []


def test_an_edit_callback_is_never_cached() -> None:
    def edit(data: dict[str, object]) -> None:
        data["name"] = "edited"

    assert load_spec("harness.yaml", edit=edit).name == "edited"
    assert entries() == []
    assert load_spec("harness.yaml").name == "cache-test"


def test_a_value_json_cannot_keep_is_not_written() -> None:
    """YAML reads `2024-01-01` as a date: JSON would bring it back as text, so no entry."""
    Path("harness.yaml").write_text(SPEC.replace("temperature: 0", "since: 2024-01-01"))
    spec = load_spec("harness.yaml")
    assert str(spec.document.models["default"].options["since"]) == "2024-01-01"
    assert entries() == []


# -- the entry reader on hostile bytes -------------------------------------------------------


def _entry_and_key() -> tuple[bytes, Spec, object]:
    expected = load_spec("harness.yaml")
    [entry] = entries()
    raw = entry.read_bytes()
    stored = json.loads(raw.partition(b"\n")[2])["key"]
    return raw, expected, lambda baseline: stored


FIXTURE = [HealthCheck.function_scoped_fixture]

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=512))
def test_decode_of_any_bytes_is_none_or_a_spec(data: bytes) -> None:
    key = lambda baseline: {}  # noqa: E731
    assert spec_cache.decode(data, key) is None


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(at=st.integers(min_value=0), byte=st.integers(min_value=0, max_value=255))
def test_decode_of_a_flipped_byte_is_a_miss_or_the_same_spec(at: int, byte: int) -> None:
    raw, expected, key = _entry_and_key()
    damaged = bytearray(raw)
    damaged[at % len(raw)] = byte
    got = spec_cache.decode(bytes(damaged), key)  # type: ignore[arg-type]
    if got is not None:
        assert_same(got, expected)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(path=st.lists(st.text(max_size=12), min_size=1, max_size=4), value=_JSON)
def test_decode_of_a_rewritten_value_never_raises(path: list[str], value: object) -> None:
    """An entry whose checksum matches but whose data is odd decodes to a spec or to a miss."""
    import hashlib

    raw, _, key = _entry_and_key()
    entry = json.loads(raw.partition(b"\n")[2])
    node = entry["spec"]
    keys = ["document", *path]
    for name in keys[:-1]:
        if not isinstance(node, dict):
            break
        node = node.setdefault(name, {})
    if isinstance(node, dict):
        node[keys[-1]] = value
    text = json.dumps(entry).encode()
    forged = hashlib.sha256(text).hexdigest().encode() + b"\n" + text
    got = spec_cache.decode(forged, key)  # type: ignore[arg-type]
    assert got is None or isinstance(got, Spec)


# -- the data of included YAML files (a scripted model's script) ---------------------------------


def data_entries() -> list[Path]:
    return entries("data-*.json")


def read_script_turns() -> list[str]:
    from pytest_harness.models.scripted import _read_script

    script = _read_script(Path.cwd(), Path.cwd() / "turns.yaml")
    return [turn.say or "" for turn in script.turns]


def test_a_script_is_read_once_then_from_its_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_harness.spec import yamlio

    assert read_script_turns() == ["first answer"]
    [entry] = data_entries()
    with monkeypatch.context() as mp:
        mp.setattr(yamlio, "read_yaml", lambda *a, **k: pytest.fail("read the file"))
        assert read_script_turns() == ["first answer"]
    entry.write_bytes(entry.read_bytes()[:-5])  # damaged: a miss, read and written again
    assert read_script_turns() == ["first answer"]
    assert json.loads(entry.read_bytes().partition(b"\n")[2])["data"] == [{"say": "first answer"}]


def test_an_edited_script_with_an_error_names_its_line() -> None:
    assert read_script_turns() == ["first answer"]
    Path("turns.yaml").write_text("- say: fine\n- sya: typo\n", encoding="utf-8")
    with pytest.raises(SpecError) as info:
        read_script_turns()
    assert str(info.value).startswith("turns.yaml:2 [1].sya: unknown key 'sya'")


def test_script_data_json_cannot_keep_exactly_is_not_written() -> None:
    """YAML reads `2024-01-01` as a date, which JSON would bring back as text: no entry."""
    Path("turns.yaml").write_text(
        "- call: lookup_order\n  args: {order_id: A-1, since: 2024-01-01}\n- say: done\n"
    )
    from pytest_harness.models.scripted import _read_script

    script = _read_script(Path.cwd(), Path.cwd() / "turns.yaml")
    assert str(script.turns[0].args["since"]) == "2024-01-01"
    assert data_entries() == []


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ([1, {"a": 2.0}], [1, {"a": 2.0}], True),
        ([1], [1.0], False),
        ([1], [True], False),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, False),
        ({"a": [None]}, {"a": [None]}, True),
    ],
)
def test_same_means_the_same_types(a: object, b: object, same: bool) -> None:
    from pytest_harness.spec.yamlcache import same as same_data

    assert same_data(a, b) is same


@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE)
@given(data=st.binary(max_size=512))
def test_the_data_reader_of_any_bytes_is_a_miss(data: bytes) -> None:
    from pytest_harness.spec import yamlcache

    script = Path.cwd() / "turns.yaml"
    entry = yamlcache.data_file(Path.cwd(), script)
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_bytes(data)
    assert yamlcache.read(Path.cwd(), script) is yamlcache.MISSING


def test_a_device_or_a_pipe_is_never_read_for_a_key(tmp_path: Path) -> None:
    import os

    assert spec_cache.file_digest(Path("/dev/zero")) is None
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    assert spec_cache.file_digest(fifo) is None  # returns at once: no writer is waited for
    with pytest.raises(SpecError, match="a YAML file was expected"):
        load_spec(fifo)
