"""Start a refund that needs a finance approval, then let the process end."""

import asyncio
from pathlib import Path

import pytest_harness as ph

SPEC = Path(__file__).with_name("harness.yaml")


async def main() -> str:
    async with ph.load(SPEC) as harness:
        result = await harness.run("orders", "Refund $250 on order A-1001.", principal="ann")
    print(f"{result.status.value}: {result.run_id}")
    return result.run_id


if __name__ == "__main__":
    asyncio.run(main())
