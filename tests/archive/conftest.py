"""A recorded run of a small app, exported as `.hx` archives for the archive tests."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import pytest_harness as ph

SPEC = """
rules:
  - {{id: R1, when: 'tool == "refund" && args.amount > 100', then: approve, approvers: [finance]}}
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order, refund]
state: {{record: true, use: sqlite, path: state.db}}
"""

SCRIPT = (
    "[{call: lookup_order, args: {order_id: A-1, api_key: sk-live-123}}, "
    "{call: refund, args: {order_id: A-1, amount: 250}}, {say: 'Refunded A-1.'}]"
)


async def make_archives(app, folder: Path) -> dict[str, Path]:
    """Run the refund flow once; export it metadata-only and with payloads."""
    app.write(SPEC.format())
    app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {SCRIPT}", 1))
    async with ph.load(app.spec) as harness:
        waiting = await harness.run("orders", "Refund A-1", principal="ann")
        done = await harness.approve(
            waiting.run_id,
            waiting.approval.approval_id,
            "approve",
            approver=ph.Principal("fiona", ("finance",)),
        )
        assert done.ok
        full = await harness.export(
            done.run_id, folder / "full.hx", policy=ph.ExportPolicy(include_payloads=True)
        )
        meta = await harness.export(done.run_id, folder / "meta.hx")
    return {"full": full, "meta": meta, "run_id": Path(done.run_id)}


@pytest.fixture
def archives(app, tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "out"
    return asyncio.run(make_archives(app, folder))
