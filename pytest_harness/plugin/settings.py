"""The pytest plugin's settings: its options and ini values, resolved once per session.

Precedence, highest first: a test's `@pytest.mark.harness(...)` marker, the command line, the
ini file, the defaults. Paths from the ini file are relative to the ini file's folder; paths from
the command line are relative to the directory pytest was started in. This module is imported
when the plugin loads, so it imports nothing heavy.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_harness.plugin.fixtures import TestRuns
    from pytest_harness.plugin.items import ReplaySession

__all__ = [
    "DEFAULT_ENV",
    "FAIL_ON_KINDS",
    "RECORDINGS_PROPERTY",
    "REPLAY_PROPERTY",
    "REPLAY_SESSION",
    "RUNS",
    "SETTINGS",
    "UNGATED_PROPERTY",
    "RecordMode",
    "Settings",
    "in_ci",
    "parse_fail_on",
]

DEFAULT_ENV = "offline"
"""The environment fixtures and replays use unless told otherwise (when the spec defines it)."""

FAIL_ON_KINDS = ("status", "output", "decisions", "requests")
"""What `--replay-fail-on` accepts: the kinds of difference a replay report can fail on."""
DEFAULT_FAIL_ON = frozenset({"status", "output", "decisions"})


class RecordMode(str, Enum):
    """`--record-recordings`: which golden files the runs of a test session write."""

    NONE = "none"
    """Write nothing (the default)."""
    NEW = "new"
    """Write the golden files that do not exist yet."""
    ALL = "all"
    """Write every golden file whose content changed."""


def parse_fail_on(value: str) -> frozenset[str]:
    """Parse `status,output,...` for `--replay-fail-on`, naming the valid kinds on a mistake."""
    kinds = frozenset(part.strip() for part in value.split(",") if part.strip())
    unknown = sorted(kinds - set(FAIL_ON_KINDS))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown kind {', '.join(map(repr, unknown))}; "
            f"choose from {', '.join(FAIL_ON_KINDS)} (comma-separated)"
        )
    return kinds


class Settings:
    """Every plugin option of one pytest session, with paths resolved.

    A plain class rather than a dataclass: it is built at every pytest start, where a dataclass's
    generated methods would cost a millisecond or two.
    """

    __slots__ = (
        "allow_live",
        "env",
        "fail_on",
        "prune",
        "record",
        "recordings",
        "replay",
        "replay_args",
        "replay_tools",
        "reports",
        "rootpath",
        "spec",
        "strict",
        "update",
    )

    def __init__(
        self,
        *,
        rootpath: Path,
        spec: Path,
        env: str,
        recordings: Path,
        replay: bool = False,
        fail_on: frozenset[str] = DEFAULT_FAIL_ON,
        update: bool = False,
        record: RecordMode = RecordMode.NONE,
        prune: bool = False,
        reports: tuple[Path, ...] = (),
        allow_live: bool = False,
        replay_tools: str | None = None,
        strict: str = "",
        replay_args: tuple[str, ...] = (),
    ) -> None:
        self.rootpath = rootpath
        self.spec = spec
        self.env = env
        self.recordings = recordings
        self.replay = replay
        self.fail_on = fail_on
        self.update = update
        self.record = record
        self.prune = prune
        self.reports = reports
        """`--replay-report` paths, in the order given (each rendered by its suffix)."""
        self.allow_live = allow_live
        self.replay_tools = replay_tools
        """`--replay-tools`: `safe` runs the safe tools during replay; None runs none."""
        self.strict = strict
        """Why tests without golden files fail (`--harness-strict`, …), or "" when they do not."""
        self.replay_args = replay_args
        """The command-line options, not at their defaults, that change what a replay does.

        `--harness-spec` and `--harness-env` when they differ from the ini's, and
        `--replay-tools`: a command that repeats this session's replays (the hint that accepts
        a drift with `--update-recordings`) passes them on. `--replay-fail-on` is not among
        them: `--update-recordings` rewrites a file on any difference, counted or not.
        """

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"Settings({fields})"

    @classmethod
    def from_config(cls, config: pytest.Config) -> Settings:
        """Read the options and ini values of `config`."""
        opt = config.option
        here = config.invocation_params.dir
        ini_dir = config.inipath.parent if config.inipath is not None else config.rootpath
        spec_opt: str | None = opt.harness_spec
        env_opt: str | None = opt.harness_env
        report_opts: list[str] | None = opt.harness_report
        fail_on: frozenset[str] | None = opt.harness_fail_on
        ini_spec = _path(config.getini("harness_spec"), ini_dir)
        spec = _path(spec_opt, here) if spec_opt else ini_spec
        ini_env = str(config.getini("harness_env"))
        replay_tools: str | None = getattr(opt, "harness_replay_tools", None)
        replay_args: list[str] = []
        if spec != ini_spec:
            replay_args.append(f"--harness-spec={_shown(spec, config.rootpath)}")
        if env_opt is not None and env_opt != ini_env:
            replay_args.append(f"--harness-env={env_opt}")
        if replay_tools is not None:
            replay_args.append(f"--replay-tools={replay_tools}")
        return cls(
            rootpath=config.rootpath,
            spec=spec,
            env=env_opt if env_opt is not None else ini_env,
            recordings=_path(config.getini("harness_recordings"), ini_dir),
            replay=bool(opt.harness_replay or opt.harness_update),
            fail_on=DEFAULT_FAIL_ON if fail_on is None else fail_on,
            update=bool(opt.harness_update),
            record=RecordMode(opt.harness_record),
            prune=bool(opt.harness_prune),
            reports=tuple(_path(p, here) for p in report_opts or ()),
            allow_live=bool(opt.harness_allow_live),
            replay_tools=replay_tools,
            strict=_strictness(config),
            replay_args=tuple(replay_args),
        )

    @property
    def tracks_goldens(self) -> bool:
        """Whether tests' runs are counted against golden files (recording or pruning)."""
        return self.record is not RecordMode.NONE or self.prune

    @property
    def needs_ledger(self) -> bool:
        """Whether this session has replay items or golden files to summarise."""
        return self.replay or self.tracks_goldens or bool(self.reports)

    def show(self, path: str | os.PathLike[str]) -> str:
        """`path` as messages show it: relative to the rootdir when inside it."""
        return _shown(path, self.rootpath)


def _shown(path: str | os.PathLike[str], rootpath: Path) -> str:
    absolute = os.path.abspath(path)
    root = str(rootpath)
    inside = root if root.endswith(os.sep) else root + os.sep
    if (
        absolute.startswith(inside)
        and len(absolute) > len(inside)
        and not absolute.startswith(os.sep, len(inside))
    ):
        # inside the rootdir, as its name says (every replayed file): string work, as pathlib
        # (which keeps POSIX's `//x` apart from `/x`)
        return absolute[len(inside) :].replace(os.sep, "/")
    try:
        return Path(absolute).relative_to(rootpath).as_posix()
    except ValueError:
        return absolute


def _strictness(config: pytest.Config) -> str:
    if config.option.harness_strict:
        return "--harness-strict"
    if config.getini("harness_strict"):
        return "the harness_strict ini value"
    if in_ci():
        return f"CI={os.environ.get('CI', '').strip()}"
    return ""


def in_ci(environ: Mapping[str, str] | None = None) -> bool:
    """Whether `CI` is set to a non-empty value other than `0` or `false` (any case)."""
    value = (os.environ if environ is None else environ).get("CI", "").strip()
    return value.lower() not in ("", "0", "false")


def _path(value: str | os.PathLike[str], base: Path) -> Path:
    path = Path(os.path.expanduser(os.fspath(value)))
    return Path(os.path.normpath(path if path.is_absolute() else base / path))


SETTINGS = pytest.StashKey[Settings]()
"""Where `pytest_configure` keeps the session's `Settings` (`config.stash[SETTINGS]`)."""
RUNS: pytest.StashKey[TestRuns] = pytest.StashKey()
"""Where the fixtures keep a test's `TestRuns` (`item.stash[RUNS]`)."""

REPLAY_PROPERTY = "harness_replay"
"""The `report.user_properties` key of a replay item's outcome (JSON)."""
RECORDINGS_PROPERTY = "harness_recordings"
"""The `report.user_properties` key of a test's golden runs (JSON)."""
UNGATED_PROPERTY = "harness_ungated"
"""The `report.user_properties` key of a test that made runs without golden files (JSON)."""
REPLAY_SESSION: pytest.StashKey[ReplaySession] = pytest.StashKey()
"""Where replay items keep the process's loaded harnesses and event loop."""
