"""The flight recorder, end to end and offline.

    python flight_recorder.py --output /tmp/invoice-incident.hx

Runs the invoices task (its first model call fails and is retried, its tool returns a CSV
artifact, its output guard redacts a card number) on a SQLite store in a temporary folder,
exports the run with payloads and artifacts, deletes the store, then verifies the archive and
plays it back: no model or tool is called again.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

import pytest_harness as ph

HERE = Path(__file__).parent


async def main(output: Path) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="flight-recorder-"))
    shutil.copy(HERE / "harness.yaml", workdir / "harness.yaml")
    shutil.copy(HERE / "invoices.py", workdir / "invoices.py")
    async with ph.load(workdir / "harness.yaml") as harness:
        result = await harness.run("invoices", "Analyze overdue invoices", principal="ann")
        print(f"{result.status.value}: {result.output}")
        policy = ph.ExportPolicy(include_payloads=True, include_artifacts=True)
        bundle = await harness.export(result.run_id, output, policy=policy)
    import invoices  # the tools module the spec loaded

    calls = dict(invoices.CALLS)
    shutil.rmtree(workdir)  # the runtime's database is gone; the archive is all there is
    print(f"exported {bundle} ({bundle.stat().st_size} bytes); store deleted")

    report = ph.verify_archive(bundle)
    print(f"valid: {report.valid}, complete: {report.complete}, issues: {len(report.issues)}")
    played = ph.playback(bundle)
    for record in played.records:
        if record["kind"] != "event":
            print(record["seq"], record["kind"], record["attempt_id"] or "")
    artifacts = {sha[:12]: len(data) for sha, data in played.artifacts.items()}
    print(f"artifacts: {artifacts}")
    assert calls == invoices.CALLS, "playback called a model or a tool"
    print(f"calls during the run: {calls}; during verify and playback: none")
    return 0 if report.valid and report.complete else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("invoice-incident.hx"))
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.output)))
