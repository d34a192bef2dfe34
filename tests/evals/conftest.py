"""A small app with online evals: `evals_app(graders, ...)` writes its harness.yaml."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

GRADERS_MODULE = '''
import asyncio

SEEN = []


def shouting(result):
    SEEN.append(result.run_id)
    return (result.output or "").isupper()


def half(result):
    return 0.5


def too_big(result):
    return 7


def wrong_type(result):
    return "yes"


def broken(result):
    raise RuntimeError("the grader broke")


def nul_broken(result):
    raise RuntimeError("the output has a NUL: \\x00")


async def slow(result):
    await asyncio.sleep(0.3)
    return True


async def async_ok(result):
    return 1.0


def refund(order_id: str, amount: float) -> dict:
    """Refund an order."""
    return {"order_id": order_id, "amount": amount}
'''


def spec_text(
    graders: str,
    *,
    answer: str = "Thank you! Order A-1 was delivered.",
    judge: str = "0.8",
    sample: float = 1,
    module: str = "graders",
    state: str = "{use: memory}",
    extra: str = "",
) -> str:
    body = f"""
    version: 1
    name: evals-app
    models:
      default:
        use: scripted
        script: [{{say: {answer!r}}}]
      judge:
        use: scripted
        script: [{{say: {judge!r}}}]
    tools:
      refund: {{call: "{module}:refund"}}
    rules:
      - id: big
        when: tool == "refund" && args.amount > 100
        then: approve
        approvers: [finance]
    tasks:
      orders: {{prompt: You are an order desk., tools: [refund], budget: {{steps: 3}}}}
      other: {{prompt: Something else.}}
    state: {state}
    {extra}
    evals:
      online:
        sample: {sample}
        graders:
    """
    indented = textwrap.indent(textwrap.dedent(graders).strip("\n"), " " * 10)
    return (
        textwrap.dedent(body).replace("{module}", module)
        + indented.replace("{module}", module)
        + "\n"
    )


class EvalsApp:
    def __init__(self, root: Path, module: str) -> None:
        self.root = root
        self.module = module
        self.spec = root / "harness.yaml"

    def write(self, graders: str, **options: object) -> Path:
        text = spec_text(graders, module=self.module, **options)  # type: ignore[arg-type]
        self.spec.write_text(text, encoding="utf-8")
        return self.spec

    @property
    def graders(self):  # the generated graders module, once imported
        return sys.modules[self.module]


@pytest.fixture
def evals_app(tmp_path: Path) -> Iterator[EvalsApp]:
    module = f"graders_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{module}.py").write_text(GRADERS_MODULE, encoding="utf-8")
    yield EvalsApp(tmp_path, module)
    sys.modules.pop(module, None)
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


Write = Callable[[str], Path]
