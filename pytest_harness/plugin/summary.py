"""The session's view of replays and golden runs: counts, unused files, the JSON report.

`Ledger` lives where reports arrive: in the pytest-xdist controller, or in the one process
without xdist. It reads (and removes, so junit XML stays clean) the JSON that replay items and
the fixtures put in `report.user_properties`, and at the end prunes unused golden files, writes
each `--replay-report` (by its suffix) and prints the `harness replay` and `harness recordings`
sections.

`GoldenTracker` lives where tests run (the one process, or each worker): it marks tests whose
setup or call did not pass and tells the ledger which test modules were collected in full, so
that a golden file is called unused only when every test of its module ran.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_harness.plugin.golden import golden_key, golden_names, unused_files
from pytest_harness.plugin.settings import (
    FAIL_ON_KINDS,
    RECORDINGS_PROPERTY,
    REPLAY_PROPERTY,
    UNGATED_PROPERTY,
    RecordMode,
    Settings,
)

__all__ = ["GoldenTracker", "Ledger", "register"]

MODULES_OUTPUT = "harness_modules"
"""The `workeroutput` key under which an xdist worker sends its collected modules."""
FIXTURES = frozenset({"harness", "aharness", "harness_factory", "scripted", "_harness_runs"})
OUTCOMES = ("same", "drifted", "diverged", "error", "updated")


def register(config: pytest.Config, settings: Settings) -> None:
    """Register the ledger (not in an xdist worker) and the golden tracker (where tests run)."""
    is_worker = hasattr(config, "workerinput")
    ledger = None
    if not is_worker:
        ledger = Ledger(settings, config)
        config.pluginmanager.register(ledger, "harness-ledger")
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(_XdistController(ledger), "harness-xdist")
    if settings.tracks_goldens:
        config.pluginmanager.register(GoldenTracker(config, settings, ledger), "harness-goldens")


class GoldenTracker:
    """Marks tests that did not pass and reports which modules were collected in full."""

    def __init__(self, config: pytest.Config, settings: Settings, ledger: Ledger | None) -> None:
        self.config = config
        self.settings = settings
        self.ledger = ledger
        self.partial: set[str] = set()

    def pytest_deselected(self, items: Iterable[pytest.Item]) -> None:
        """A module with a deselected test did not run in full."""
        self.partial.update(golden_key(item.nodeid)[0] for item in items)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Send the tests of modules with a golden folder or the fixtures; refuse name clashes."""
        collected: dict[str, list[str]] = {}
        owners: dict[tuple[str, str], str] = {}
        exists: dict[str, bool] = {}
        for item in session.items:
            if item.path.suffix != ".py":
                continue
            key = golden_key(item.nodeid)
            folder = key[0]
            if folder not in exists:
                exists[folder] = (self.settings.recordings / folder).is_dir()
            collected.setdefault(folder, []).append(item.nodeid)
            if FIXTURES & set(getattr(item, "fixturenames", ())):
                exists[folder] = True  # its tests may write golden files: it is checked too
                other = owners.setdefault(key, item.nodeid)
                if other != item.nodeid:
                    shown = self.settings.show(self.settings.recordings / folder / key[1])
                    raise pytest.UsageError(
                        f"pytest-harness: {other} and {item.nodeid} would write the same golden "
                        f"files ({shown}*.yaml); rename one of them (or its test module)"
                    )
        for arg in session.config.args:  # `file.py::test` collects part of a module only
            if "::" in arg:
                self.partial.add(golden_key(arg.replace(os.sep, "/"))[0])
        modules = {folder: ids for folder, ids in collected.items() if exists[folder]}
        info = {"modules": modules, "partial": sorted(self.partial)}
        if self.ledger is not None:
            self.ledger.add_modules(info)
        else:
            workeroutput: dict[str, Any] = self.config.workeroutput  # type: ignore[attr-defined]
            workeroutput[MODULES_OUTPUT] = info


class _XdistController:
    """xdist-only hooks, registered only when pytest-xdist is installed."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        """A worker finished: merge the modules it collected."""
        info = getattr(node, "workeroutput", {}).get(MODULES_OUTPUT)
        if info:
            self.ledger.add_modules(info)


class Ledger:
    """Gathers the replay outcomes and golden runs of the session and reports them."""

    def __init__(self, settings: Settings, config: pytest.Config | None = None) -> None:
        self.settings = settings
        self.config = config
        self.replays: dict[str, dict[str, Any]] = {}
        self.ungated: dict[str, dict[str, Any]] = {}
        """Tests that made runs without golden files: node id → runs and missing files."""
        self.goldens: dict[str, dict[str, Any]] = {}
        self.finished: set[str] = set()
        self.unlucky: set[str] = set()
        self.modules: dict[str, set[str]] | None = None
        self.partial: set[str] = set()
        self.unused: list[Path] = []
        self.checked: list[str] = []
        """The golden folders searched for unused files (their modules ran in full)."""
        self.pruned: list[Path] = []
        self.problems: list[str] = []

    # -- gathering -------------------------------------------------------------------------

    def add_modules(self, info: Mapping[str, Any]) -> None:
        """Merge one process's collected modules (every xdist worker sends the same)."""
        if self.modules is None:
            self.modules = {}
        for folder, nodeids in info.get("modules", {}).items():
            self.modules.setdefault(folder, set()).update(nodeids)
        self.partial.update(info.get("partial", ()))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Take this plugin's data off the report (here or from a worker) and count it."""
        if report.user_properties:
            kept = []
            for key, value in report.user_properties:
                if key == REPLAY_PROPERTY:
                    self._replayed(report, json.loads(str(value)))
                elif key == UNGATED_PROPERTY:
                    self.ungated[report.nodeid] = json.loads(str(value))
                elif key == RECORDINGS_PROPERTY:
                    self.goldens[report.nodeid] = json.loads(str(value))
                else:
                    kept.append((key, value))
            report.user_properties = kept
        if self.settings.tracks_goldens:
            if report.when == "teardown":
                self.finished.add(report.nodeid)
            if not report.passed:
                self.unlucky.add(report.nodeid)

    def _replayed(self, report: pytest.TestReport, data: dict[str, Any]) -> None:
        self.replays[report.nodeid] = data
        self._junit_classname(report, str(data.get("file") or ""))
        if report.failed and isinstance(report.longrepr, str) and "report" in data:
            # From an xdist worker the failure arrives as plain text: draw it again here.
            from pytest_harness.plugin.render import ReplayFailureRepr

            repr_ = ReplayFailureRepr(data["report"], data["plain"], data.get("hint"))
            report.longrepr = repr_  # type: ignore[assignment]

    def _junit_classname(self, report: pytest.TestReport, file: str) -> None:
        """Name a replay item's junit class by its file without the suffix.

        As pytest does for `.py` files: `recordings.test_shop.test_refund`, not `….yaml`.
        """
        if self.config is None or not file:
            return
        from _pytest.junitxml import xml_key

        xml = self.config.stash.get(xml_key, None)
        if xml is None:
            return
        names = [part for part in Path(file).with_suffix("").as_posix().split("/") if part]
        if xml.prefix:
            names.insert(0, xml.prefix)
        xml.node_reporter(report).add_attribute("classname", ".".join(names))

    # -- finishing -------------------------------------------------------------------------

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Find (and prune) unused golden files, write `--replay-report`; OR in any failure."""
        settings = self.settings
        if settings.tracks_goldens:
            self.unused = self._find_unused()
            if settings.prune:
                self._prune()
        if settings.reports:
            document = self.document()
            for path in settings.reports:
                self._write_report(path, document)
        if (
            settings.replay
            and not self.replays
            and session.exitstatus == pytest.ExitCode.OK
            and not session.config.option.collectonly
        ):
            session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
        if self.problems:
            session.exitstatus = int(session.exitstatus) | int(pytest.ExitCode.TESTS_FAILED)

    def _find_unused(self) -> list[Path]:
        if self.modules is None:
            return []
        found: list[Path] = []
        for folder, nodeids in sorted(self.modules.items()):
            if folder in self.partial or not nodeids <= self.finished:
                continue
            self.checked.append(folder)
            exact: set[str] = set()
            bases: set[str] = set()
            for nodeid in nodeids:
                base = golden_key(nodeid)[1]
                if nodeid in self.unlucky:
                    bases.add(base)
                else:
                    count = int(self.goldens.get(nodeid, {}).get("runs", 0))
                    exact.update(golden_names(base, count))
            found += unused_files(self.settings.recordings / folder, exact=exact, bases=bases)
        return found

    def _prune(self) -> None:
        for path in self.unused:
            try:
                path.unlink()
            except OSError as exc:
                self.problems.append(f"could not delete {self.settings.show(path)}: {exc}")
                continue
            self.pruned.append(path)
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # only when now empty

    def document(self) -> dict[str, Any]:
        """The session's replay report document: what `.json` holds, what renderers are given."""
        from pytest_harness.reports import REPORT_FORMAT

        entries = sorted(self.replays.values(), key=lambda d: (str(d.get("file")), d["nodeid"]))
        return {
            "format": REPORT_FORMAT,
            "fail_on": sorted(self.settings.fail_on),
            "summary": self.counts(),
            "recordings": [
                {
                    "file": d.get("file"),
                    "nodeid": d.get("nodeid"),
                    "outcome": d.get("outcome"),
                    "differences": d.get("differences", []),
                    "error": d.get("error"),
                    "report": d.get("report"),
                }
                for d in entries
            ],
        }

    def _write_report(self, path: Path, document: Mapping[str, Any]) -> None:
        from pytest_harness.reports import ReportError, write_report

        try:
            write_report(path, document)
        except ReportError as exc:
            self.problems.append(str(exc))
        except OSError as exc:
            self.problems.append(f"could not write the replay report {path}: {exc}")

    def counts(self) -> dict[str, int]:
        """How many replays ended each way (`updated` ones are also drifted or not failing)."""
        counts = dict.fromkeys(("total", *OUTCOMES), 0)
        for data in self.replays.values():
            counts["total"] += 1
            counts[str(data.get("outcome"))] = counts.get(str(data.get("outcome")), 0) + 1
        return counts

    # -- the terminal summary --------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> str | None:
        """Name the spec, environment and golden folder of a session that replays or records."""
        s = self.settings
        if not s.needs_ledger:
            return None
        return (
            f"harness: spec {s.show(s.spec)} (env {s.env}), golden files in {s.show(s.recordings)}/"
        )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The `harness replay` and `harness recordings` sections."""
        tr = terminalreporter
        if self.replays:
            tr.write_sep("=", "harness replay")
            self._replay_summary(tr)
        elif self.settings.replay and not tr.config.option.collectonly:
            tr.write_sep("=", "harness replay")
            where = " ".join(self.config.args) if self.config is not None else "the given paths"
            tr.write_line(
                f"no recordings replayed: no recording files (.yaml, .yml, .hx) were collected "
                f"from {where}",
                red=True,
                bold=True,
            )
        if self.settings.tracks_goldens or self.ungated:
            tr.write_sep("=", "harness recordings")
        if self.ungated:
            self._ungated_summary(tr)
        if self.settings.tracks_goldens:
            self._golden_summary(tr)
        for problem in self.problems:
            tr.write_line(f"pytest-harness: {problem}", red=True)

    def _replay_summary(self, tr: Any) -> None:
        c = self.counts()
        noun = "recording" if c["total"] == 1 else "recordings"
        bad = c["drifted"] + c["diverged"] + c["error"]
        line = (
            f"{c['total']} {noun} replayed: {c['same']} same, {c['drifted']} drifted, "
            f"{c['diverged']} diverged, {_count(c['error'], 'error')}"
        )
        if c["updated"]:
            line += f", {c['updated']} updated"
        tr.write_line(line, red=bad > 0, green=bad == 0, bold=True)
        self._requests_summary(tr, c["total"])
        by_outcome: dict[str, list[dict[str, Any]]] = {}
        for data in sorted(self.replays.values(), key=lambda d: str(d.get("file"))):
            by_outcome.setdefault(str(data.get("outcome")), []).append(data)
        for outcome, title in (
            ("drifted", "drifted"),
            ("diverged", "diverged"),
            ("error", "errors"),
            ("updated", "updated from the replay (review the diff, then commit)"),
        ):
            found = by_outcome.get(outcome)
            if not found:
                continue
            tr.write_line(f"{title}:", yellow=outcome == "updated", red=outcome != "updated")
            for data in found:
                tr.write_line(f"  {_describe(data)}")

    def _requests_summary(self, tr: Any, total: int) -> None:
        """Count the replays whose model requests changed, failing or not, and say what changed."""
        changed = sorted(
            (d for d in self.replays.values() if (d.get("requests") or {}).get("changed")),
            key=lambda d: str(d.get("file")),
        )
        if not changed:
            return
        failing = "requests" in self.settings.fail_on
        note = "" if failing else " (not failing: add requests to --replay-fail-on to fail on it)"
        tr.write_line(f"model requests changed in {len(changed)} of {total} replayed{note}:")
        for data in changed:
            requests = data["requests"]
            why = f" ({'; '.join(requests['parts'])})" if requests.get("parts") else ""
            counted = f"{requests['changed']} of {requests['total']}"
            tr.write_line(f"  {data.get('file')}: {counted}{why}")

    def _golden_summary(self, tr: Any) -> None:
        s = self.settings
        statuses: dict[str, list[str]] = {}
        for data in self.goldens.values():
            for file, status in data.get("files", {}).items():
                statuses.setdefault(status, []).append(file)
        if s.record is not RecordMode.NONE:
            written = sorted(statuses.get("written", []))
            parts = [
                f"{len(written)} written",
                f"{len(statuses.get('unchanged', []))} unchanged",
            ]
            if s.record is RecordMode.NEW:
                parts.append(f"{len(statuses.get('kept', []))} kept (already there)")
            tr.write_line(f"golden runs in {s.show(s.recordings)}: {', '.join(parts)}", bold=True)
            for file in written:
                tr.write_line(f"  written: {file}")
            failed = sorted(n for n, d in self.goldens.items() if d.get("failed"))
            if failed:
                tr.write_line(
                    f"{_count(len(failed), 'test')} did not pass; "
                    f"{'its' if len(failed) == 1 else 'their'} golden runs were not written:",
                    yellow=True,
                )
                for nodeid in failed:
                    tr.write_line(f"  {nodeid}")
        if self.pruned:
            tr.write_line(f"deleted {_count(len(self.pruned), 'unused golden file')}:", yellow=True)
            for path in self.pruned:
                tr.write_line(f"  {s.show(path)}")
        elif self.unused:
            tr.write_line(
                f"{_count(len(self.unused), 'unused golden file')} (no test wrote "
                f"{'it' if len(self.unused) == 1 else 'them'}; delete "
                f"{'it' if len(self.unused) == 1 else 'them'} with --prune-recordings):",
                yellow=True,
            )
            for path in self.unused:
                tr.write_line(f"  {s.show(path)}")
        elif self.checked:
            folders = ", ".join(f"{s.show(s.recordings / folder)}/" for folder in self.checked)
            tr.write_line(f"no unused golden files in {folders}")
        if self.modules and (self.unused or self.pruned or self.checked):
            unchecked = sorted(set(self.modules) - set(self.checked))
            if unchecked:
                folders = ", ".join(f"{s.show(s.recordings / f)}/" for f in unchecked)
                tr.write_line(
                    f"unused golden files not checked in {folders} (not every test of the "
                    "module ran)"
                )
        elif self.modules:
            tr.write_line("unused golden files: not checked (no test module ran in full)")

    def _ungated_summary(self, tr: Any) -> None:
        import shlex

        s = self.settings
        nodeids = sorted(self.ungated)
        strict = f"; they fail because {s.strict} is set" if s.strict else ""
        tr.write_line(
            f"{_count(len(nodeids), 'test')} made harness runs but "
            f"{'has' if len(nodeids) == 1 else 'have'} no golden file, so the replay gate "
            f"does not cover {'it' if len(nodeids) == 1 else 'them'}{strict}:",
            yellow=not s.strict,
            red=bool(s.strict),
        )
        for nodeid in nodeids:
            missing = self.ungated[nodeid].get("missing") or []
            tr.write_line(f"  {nodeid} (missing {', '.join(missing)})")
        quoted = " ".join(shlex.quote(n) for n in nodeids)
        tr.write_line(f"record them with: pytest --record-recordings=new {quoted}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _describe(data: Mapping[str, Any]) -> str:
    file = data.get("file")
    outcome = data.get("outcome")
    if outcome == "error":
        return str(data.get("error"))
    if outcome == "diverged":
        return f"{file}: {data.get('reason')}"
    status = data.get("status") or ["?", "?"]
    found = set(data.get("differences", ()))
    changed = [kind for kind in FAIL_ON_KINDS if kind in found and kind != "status"]
    parts = [f"status {status[0]} → {status[1]}"] if status[0] != status[1] else []
    if changed:
        parts.append(f"{' and '.join(changed)} changed")
    return f"{file}: {'; '.join(parts) or 'no differences'}"
