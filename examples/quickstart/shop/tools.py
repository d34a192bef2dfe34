"""The shop's tools: plain Python functions the model may call."""

from __future__ import annotations

import pytest_harness as ph

ORDERS = {
    "A-1001": {"order_id": "A-1001", "customer": "ann", "total": 250.0, "status": "delivered"},
    "A-1002": {"order_id": "A-1002", "customer": "bob", "total": 40.0, "status": "shipped"},
}


def lookup_order(order_id: str) -> dict[str, object]:
    """Look an order up by its id.

    Args:
        order_id: The order's id, like A-1001.
    """
    order = ORDERS.get(order_id)
    if order is None:
        raise LookupError(f"no order {order_id}")
    return order


def refund(order_id: str, amount: float) -> dict[str, object]:
    """Refund part or all of an order to the customer's card.

    Args:
        order_id: The order to refund.
        amount: The amount in dollars.
    """
    key = ph.current_tool_context().execution_key
    # A real payment API takes `key` as its idempotency key, so a repeated call is dropped.
    return {"order_id": order_id, "amount": amount, "idempotency_key": key}
