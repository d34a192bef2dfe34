"""The peers of `run.py`: pydantic-ai and LangGraph doing the same 3-turn, 2-tool task.

Every function imports its framework when called, so this module imports without the `bench`
extra; `run.py` turns an `ImportError` into a skipped row. Each app mirrors the harness bench
app: turn 1 calls `lookup_order`, turn 2 calls `refund`, turn 3 says a text that passes a
card-number regex redaction; the scripted model picks its turn by the turns the run has taken.

Run as a child process (`python -c "import bench_peers; bench_peers.child()" start|resume …`)
it is the LangGraph twin of the quickstart's `main.py` / `approve.py`: `start DB` runs until the
graph interrupts before the refund and prints the thread id; `resume DB THREAD` approves it and
runs it to the end in a process that had nothing of it in memory.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

INPUT = "Refund $25 on order A-1001."
PROMPT = "You are the order desk of a shop. Look orders up before acting on them."
OUTPUT = "Done: refunded $25 on order A-1001."
ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {"order_id": "A-1001", "customer": "ann", "total": 250.0, "status": "delivered"},
}
CARD = re.compile(r"\b\d{16}\b")
LOOKUP_ARGS: dict[str, Any] = {"order_id": "A-1001"}
REFUND_ARGS: dict[str, Any] = {"order_id": "A-1001", "amount": 25}
RECURSION_LIMIT = 8
"""LangGraph's step limit, the twin of the harness budget's `steps: 8`."""


def versions() -> dict[str, str]:
    """Installed versions of the peer distributions (those that are installed)."""
    found: dict[str, str] = {}
    for name in ("pydantic-ai-slim", "langgraph", "langgraph-checkpoint-sqlite"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _check_output(framework: str, text: object) -> None:
    if text != OUTPUT:
        raise RuntimeError(f"{framework} bench app answered {text!r}, expected {OUTPUT!r}")


# -- pydantic-ai ----------------------------------------------------------------------------


async def _lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up by its id.

    Args:
        order_id: The order's id, like A-1001.
    """
    return ORDERS[order_id]


async def _refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund part or all of an order to the customer's card.

    Args:
        order_id: The order to refund.
        amount: The amount in dollars.
    """
    return {"order_id": order_id, "amount": amount, "refund_id": "rf_000000000001"}


def _pydantic_ai_agent() -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage

    async def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # An `async def`: FunctionModel runs a plain `def` in a worker thread.
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn == 0:
            return ModelResponse(parts=[ToolCallPart("lookup_order", dict(LOOKUP_ARGS))])
        if turn == 1:
            return ModelResponse(parts=[ToolCallPart("refund", dict(REFUND_ARGS))])
        usage = RequestUsage(input_tokens=420, output_tokens=12)
        return ModelResponse(parts=[TextPart(OUTPUT)], usage=usage)

    agent: Any = Agent(
        FunctionModel(scripted),
        instructions=PROMPT,
        tools=[_lookup_order, _refund],
        name="orders",
    )

    def redact(output: str) -> str:
        return CARD.sub("[redacted]", output)

    agent.output_validator(redact)
    return agent


async def _pydantic_ai_loop(runs: int) -> float:
    from pydantic_ai.usage import UsageLimits

    agent = _pydantic_ai_agent()
    limits = UsageLimits(request_limit=8, total_tokens_limit=20_000, tool_calls_limit=10)
    warm = await agent.run(INPUT, usage_limits=limits)
    _check_output("pydantic-ai", warm.output)
    started = time.perf_counter()
    for _ in range(runs):
        result = await agent.run(INPUT, usage_limits=limits)
    elapsed = time.perf_counter() - started
    _check_output("pydantic-ai", result.output)
    return elapsed


def pydantic_ai_seconds(runs: int) -> float:
    """Seconds for `runs` sequential `Agent.run` calls with a `FunctionModel` (after a warm-up)."""
    return asyncio.run(_pydantic_ai_loop(runs))


# -- LangGraph ------------------------------------------------------------------------------


def _langgraph_tools() -> list[Any]:
    from langchain_core.tools import tool

    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look an order up by its id."""
        return ORDERS[order_id]

    def refund(order_id: str, amount: float) -> dict[str, Any]:
        """Refund part or all of an order to the customer's card."""
        return {"order_id": order_id, "amount": amount, "refund_id": "rf_000000000001"}

    return [tool(lookup_order), tool(refund)]


def _model_node(state: Any) -> dict[str, Any]:
    from langchain_core.messages import AIMessage

    turn = sum(isinstance(m, AIMessage) for m in state["messages"])
    if turn == 0:
        call = {"name": "lookup_order", "args": dict(LOOKUP_ARGS), "id": "call_0"}
        return {"messages": [AIMessage("", tool_calls=[call])]}
    if turn == 1:
        call = {"name": "refund", "args": dict(REFUND_ARGS), "id": "call_1"}
        return {"messages": [AIMessage("", tool_calls=[call])]}
    return {"messages": [AIMessage(CARD.sub("[redacted]", OUTPUT))]}


def _approval_node(state: Any) -> dict[str, Any]:
    from langgraph.types import interrupt

    call = state["messages"][-1].tool_calls[0]
    decision = interrupt({"tool": call["name"], "args": call["args"]})
    if decision != "approve":
        raise RuntimeError(f"the bench approval was answered {decision!r}")
    return {}


def build_graph(checkpointer: Any, *, approval: bool = False) -> Any:
    """The agent as a graph: model node → tool node → model node … until a text answer.

    With `approval`, a refund passes an `approval` node that interrupts until resumed with
    `Command(resume="approve")` (the twin of the quickstart's approval rule).
    """
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    end: str = END

    def route(state: dict[str, Any]) -> str:
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return end
        if approval and any(c["name"] == "refund" for c in last.tool_calls):
            return "approval"
        return "tools"

    graph = StateGraph(MessagesState)
    graph.add_node("model", _model_node)
    graph.add_node("tools", ToolNode(_langgraph_tools()))
    graph.add_edge(START, "model")
    graph.add_edge("tools", "model")
    if approval:
        graph.add_node("approval", _approval_node)
        graph.add_edge("approval", "tools")
        graph.add_conditional_edges("model", route, ["tools", "approval", END])
    else:
        graph.add_conditional_edges("model", route, ["tools", END])
    return graph.compile(checkpointer=checkpointer)


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": RECURSION_LIMIT}


def _invoke(graph: Any, thread_id: str) -> Any:
    return graph.invoke({"messages": [("user", INPUT)]}, _config(thread_id), durability="sync")


def _langgraph_loop(graph: Any, runs: int) -> float:
    warm = _invoke(graph, uuid.uuid4().hex)
    _check_output("LangGraph", warm["messages"][-1].content)
    started = time.perf_counter()
    for _ in range(runs):
        out = _invoke(graph, uuid.uuid4().hex)
    elapsed = time.perf_counter() - started
    _check_output("LangGraph", out["messages"][-1].content)
    return elapsed


def langgraph_memory_seconds(runs: int) -> float:
    """Seconds for `runs` sequential `invoke`s of the graph with an `InMemorySaver`."""
    from langgraph.checkpoint.memory import InMemorySaver

    return _langgraph_loop(build_graph(InMemorySaver()), runs)


@contextmanager
def sqlite_saver(path: Path, synchronous: str = "full") -> Iterator[Any]:
    """A `SqliteSaver` on a file in WAL mode with `PRAGMA synchronous` set as asked."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    with closing(sqlite3.connect(path, check_same_thread=False)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        yield SqliteSaver(conn)


def langgraph_sqlite_seconds(runs: int, path: Path, synchronous: str = "full") -> float:
    """Seconds for `runs` sequential `invoke`s with a `SqliteSaver` and `durability="sync"`."""
    with sqlite_saver(path, synchronous) as saver:
        return _langgraph_loop(build_graph(saver), runs)


def langgraph_commits_per_run(path: Path) -> int:
    """How many `COMMIT`s one LangGraph run with a `SqliteSaver` makes (one instrumented run)."""
    commits = 0

    def trace(statement: str) -> None:
        nonlocal commits
        if statement.strip().upper().startswith("COMMIT"):
            commits += 1

    with sqlite_saver(path) as saver:
        graph = build_graph(saver)
        _invoke(graph, uuid.uuid4().hex)  # creates the tables outside the count
        saver.conn.set_trace_callback(trace)
        _invoke(graph, uuid.uuid4().hex)
        saver.conn.set_trace_callback(None)
    return commits


# -- the fresh-process pair -----------------------------------------------------------------


def _start(db: Path) -> None:
    thread_id = uuid.uuid4().hex
    with sqlite_saver(db) as saver:
        graph = build_graph(saver, approval=True)
        out = graph.invoke({"messages": [("user", INPUT)]}, _config(thread_id), durability="sync")
    if "__interrupt__" not in out:
        raise RuntimeError("the LangGraph bench app did not stop for its approval")
    print(f"awaiting_approval: {thread_id}")


def _resume(db: Path, thread_id: str) -> None:
    from langgraph.types import Command

    with sqlite_saver(db) as saver:
        graph = build_graph(saver, approval=True)
        out = graph.invoke(Command(resume="approve"), _config(thread_id), durability="sync")
    print(f"completed: {out['messages'][-1].content}")


def child(argv: list[str] | None = None) -> None:
    """Entry point of the child processes: `start DB` or `resume DB THREAD`."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "start":
        _start(Path(args[1]))
    elif len(args) == 3 and args[0] == "resume":
        _resume(Path(args[1]), args[2])
    else:
        raise SystemExit(f"usage: start DB | resume DB THREAD (got {args!r})")
