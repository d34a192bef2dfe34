"""What the replay tests share: the order desk's spec and script, writing and replaying them."""

from __future__ import annotations

import pytest_harness as ph
from pytest_harness.replay.report import ReplayReport

FINANCE = ph.Principal("fiona", ("finance",))

SPEC = """
rules:
  - id: R1
    when: tool == "refund" && args.amount > 100
    then: approve
    approvers: [finance]
  - id: R2
    when: tool == "delete_account"
    then: deny
guards: []
tasks:
  orders:
    prompt: You are the order desk.
    tools: [lookup_order, refund, delete_account]
    rules: [R1, R2]
state: {record: true}
"""

SCRIPT = (
    "[{call: lookup_order, args: {order_id: A-1}}, "
    "{call: refund, args: {order_id: A-1, amount: 250}}, "
    "{say: 'Refunded A-1, card 4111111111111111.'}]"
)


def write(app, spec: str = SPEC, script: str = SCRIPT) -> None:
    app.write(spec)
    app.spec.write_text(app.spec.read_text().replace("script: []", f"script: {script}", 1))


async def replay_file(app, path, **kw: str) -> ReplayReport:
    """Replay the recording at `path` against the app's spec, as it is now."""
    async with ph.load(app.spec) as harness:
        return await harness.replay(path, **kw)
