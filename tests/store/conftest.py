"""The `store` fixture of the store contract suites: every test on each store of `STORES`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from pytest_harness.store import Store

from .test_contract import STORES, make_store


@pytest_asyncio.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    made = make_store(request.param, tmp_path, request)
    await made.open()
    try:
        yield made
    finally:
        await made.close()
