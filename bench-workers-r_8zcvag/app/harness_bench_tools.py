"""The bench app's tools: async, like a real API client."""

from __future__ import annotations

from typing import Any

ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {"order_id": "A-1001", "customer": "ann", "total": 250.0, "status": "delivered"},
}


async def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up by its id.

    Args:
        order_id: The order's id, like A-1001.
    """
    return ORDERS[order_id]


async def refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund part or all of an order to the customer's card.

    Args:
        order_id: The order to refund.
        amount: The amount in dollars.
    """
    return {"order_id": order_id, "amount": amount, "refund_id": "rf_000000000001"}
