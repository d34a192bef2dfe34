"""Approve a waiting run from another process, which had nothing of it in memory."""

import asyncio
import sys
from pathlib import Path

import pytest_harness as ph

SPEC = Path(__file__).with_name("harness.yaml")


async def main(run_id: str) -> None:
    async with ph.load(SPEC) as harness:
        waiting = await harness.result(run_id)
        request = waiting.approval
        if request is None:
            print(f"{waiting.status.value}: nothing to approve")
            return
        fiona = ph.Principal(id="fiona", roles=("finance",))
        result = await harness.approve(run_id, request.approval_id, "approve", approver=fiona)
    print(f"{result.status.value}: {result.output}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
