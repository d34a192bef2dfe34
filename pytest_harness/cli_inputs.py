"""Where the `pytest-harness` command finds its inputs (DESIGN §8).

- The spec: the SPEC argument, else `--spec PATH`, else `$HARNESS_SPEC`, else `./harness.yaml`.
  Commands that take many files (`replay`, `mutate`) tell the spec from a recording by content:
  a YAML file that is not a recording is a spec.
- Recording folders: every `.yaml`, `.yml` and `.hx` file under them.
- The default recordings folder: the `harness_recordings` ini value of the pytest configuration
  in the working directory, else `./recordings`.
"""

from __future__ import annotations

import configparser
import os
import tomllib
from pathlib import Path

__all__ = [
    "RECORDING_SUFFIXES",
    "NoSpec",
    "choose_spec",
    "default_recordings",
    "is_spec_file",
    "recordings_under",
]

RECORDING_SUFFIXES = (".yaml", ".yml", ".hx")
_INI_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


class NoSpec(Exception):
    """No spec was given and none is found (a usage error: the CLI exits 2)."""


def choose_spec(given: str | None, option: str | None) -> str:
    """The spec to load: the argument, `--spec`, `$HARNESS_SPEC`, or `./harness.yaml`.

    `NoSpec` when the argument and `--spec` disagree, or when there is none.
    """
    if given is not None and option is not None and given != option:
        raise NoSpec(f"two specs given, {given} and --spec {option}; give one")
    chosen = given or option or os.environ.get("HARNESS_SPEC") or None
    if chosen is not None:
        return chosen
    if not Path("harness.yaml").is_file():
        raise NoSpec(
            "no spec: give a harness.yaml argument or --spec PATH, or set HARNESS_SPEC "
            "(there is no ./harness.yaml here)"
        )
    return "harness.yaml"


def is_spec_file(text: str) -> bool:
    """Whether `text` names a YAML file that is not a recording (so it must be the spec)."""
    path = Path(text)
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return False
    try:
        with path.open("rb") as stream:
            head = stream.read(4096)
    except OSError:
        return False
    return b"pytest-harness/recording@" not in head


def recordings_under(folder: Path) -> list[Path]:
    """Every recording file under `folder`, sorted."""
    return sorted(p for p in folder.rglob("*") if p.suffix in RECORDING_SUFFIXES and p.is_file())


def default_recordings(here: Path | None = None) -> Path:
    """The `harness_recordings` folder of the pytest configuration in `here`, else `recordings`.

    `here` defaults to the working directory; the folder is resolved against it.
    """
    base = Path.cwd() if here is None else here
    for name in _INI_FILES:
        path = base / name
        if not path.is_file():
            continue
        try:
            value = _ini_value(path)
        except (OSError, ValueError, configparser.Error):
            continue
        if value is None:
            continue  # not a pytest configuration: pytest would look further too
        return base / (value or "recordings")
    return base / "recordings"


def _ini_value(path: Path) -> str | None:
    """`harness_recordings` from one pytest configuration file.

    None when the file has no pytest section; "" when the section does not set it.
    """
    if path.name == "pyproject.toml":
        with path.open("rb") as stream:
            table = tomllib.load(stream).get("tool", {}).get("pytest", {})
        options = table.get("ini_options")
        if not isinstance(options, dict):
            return None
        return str(options.get("harness_recordings") or "")
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path, encoding="utf-8")
    section = "tool:pytest" if path.name == "setup.cfg" else "pytest"
    if not parser.has_section(section):
        return None
    return parser.get(section, "harness_recordings", fallback="")
