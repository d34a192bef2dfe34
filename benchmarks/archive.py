"""Flight recorder benchmark: a recorded 1,000-step run, exported as `.hx`, verified, replayed.

    .venv/bin/python benchmarks/archive.py [--steps 1000] [--store sqlite|memory]

A function model calls `lookup_order` at every step and answers at the last one, so the run
has `steps` model turns and `steps - 1` tool calls; every boundary is journaled. Prints the
run time, the journal's size, and for each export (metadata only, with payloads) the archive
size and the export and verify times; then the replay time of the archive with payloads.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest_harness as ph

APP = textwrap.dedent(
    '''
    from pytest_harness.models.base import ModelResponse, ProposedCall, TokenUsage

    STEPS = {steps}


    def lookup_order(order_id: str) -> dict:
        """Look an order up."""
        return {{"order_id": order_id, "total": 250.0, "status": "shipped"}}


    def model(request):
        done = sum(1 for m in request.messages if m["role"] == "assistant")
        if done + 1 >= STEPS:
            return ModelResponse(text="Order A-1001 has shipped.", usage=TokenUsage(40, 8))
        call = ProposedCall(f"c{{done}}", "lookup_order", {{"order_id": f"A-{{done}}"}})
        return ModelResponse(calls=(call,), usage=TokenUsage(40, 8))
    '''
)

SPEC = """
version: 1
name: bench-archive
models:
  default: {{use: function, call: "benchapp:model"}}
tools:
  lookup_order: {{call: "benchapp:lookup_order", replay: safe}}
tasks:
  orders:
    prompt: Look orders up.
    tools: [lookup_order]
    budget: {{steps: {budget}, tool_calls: {budget}, tokens: 100000000}}
state: {{use: {store}, path: state.db, record: true, synchronous: normal}}
"""


async def main(steps: int, store: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "benchapp.py").write_text(APP.format(steps=steps), encoding="utf-8")
        spec = root / "harness.yaml"
        spec.write_text(SPEC.format(budget=steps + 5, store=store), encoding="utf-8")
        async with ph.load(spec) as harness:
            started = time.perf_counter()
            result = await harness.run("orders", "Where are my orders?", principal="ann")
            ran = time.perf_counter() - started
            assert result.ok, result
            journal = await harness.store.journal(result.run_id)
            print(
                f"run: {result.usage.steps} steps, {result.usage.tool_calls} tool calls, "
                f"{len(journal)} journal records, {ran:.2f}s ({store})"
            )
            print(f"{'export':<16} {'size':>10} {'export':>9} {'verify':>9}  complete")
            for name, policy in (
                ("metadata-only", ph.ExportPolicy()),
                ("with payloads", ph.ExportPolicy(include_payloads=True)),
            ):
                dest = root / f"{name}.hx"
                started = time.perf_counter()
                await harness.export(result.run_id, dest, policy=policy)
                exported = time.perf_counter() - started
                started = time.perf_counter()
                report = ph.verify_archive(dest)
                verified = time.perf_counter() - started
                assert report.valid, report.issues
                size = dest.stat().st_size
                print(
                    f"{name:<16} {size / 1024:>8.0f} KiB {exported * 1000:>7.0f}ms "
                    f"{verified * 1000:>7.0f}ms  {report.complete}"
                )
            started = time.perf_counter()
            replayed = await harness.replay(root / "with payloads.hx")
            print(
                f"replay of the archive: {(replayed.same and 'same') or 'changed'}, "
                f"{time.perf_counter() - started:.2f}s"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.steps, args.store)))
