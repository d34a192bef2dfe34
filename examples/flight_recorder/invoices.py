"""The invoices desk's tool and its offline model (see harness.yaml)."""

from __future__ import annotations

import pytest_harness as ph
from pytest_harness.errors import ModelError
from pytest_harness.models.base import ModelRequest, ModelResponse, ProposedCall, TokenUsage

INVOICES = [("INV-1", 120.0), ("INV-2", 80.5), ("INV-3", 42.25)]
CALLS = {"model": 0, "tool": 0}
"""How often the model and the tool were called in this process."""


def invoice_total(customer: str) -> dict:
    """Add up a customer's overdue invoices.

    Args:
        customer: The customer's id.
    """
    CALLS["tool"] += 1
    rows = "".join(f"{number},{amount}\n" for number, amount in INVOICES)
    csv = ph.Artifact(f"invoice,amount\n{rows}".encode(), "text/csv", f"{customer}.csv")
    return {"customer": customer, "total": sum(a for _, a in INVOICES), "invoices": csv}


def model(request: ModelRequest) -> ModelResponse:
    """Fail the first call (a dropped connection), then look the total up, then answer."""
    CALLS["model"] += 1
    if CALLS["model"] == 1:
        raise ModelError("server", "connection reset by peer (injected)")
    last = request.messages[-1]
    if last["role"] != "tool":
        call = ProposedCall("c1", "invoice_total", {"customer": "ACME"})
        return ModelResponse(calls=(call,), usage=TokenUsage(60, 12))
    return ModelResponse(
        text="ACME owes 242.75 on 3 overdue invoices; card on file 4111111111111111.",
        usage=TokenUsage(90, 20),
    )
