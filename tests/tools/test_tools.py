"""The tools layer: import errors, schema derivation, validation, invocation, context, outcomes."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
import functools
import json
import re
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import pydantic
import pytest

from pytest_harness.errors import HarnessError, SpecError
from pytest_harness.importing import import_callable
from pytest_harness.principal import Principal
from pytest_harness.spec.schema import SpecDocument, ToolSpec
from pytest_harness.spec.spec import Spec
from pytest_harness.spec.validation import validate
from pytest_harness.tools import (
    InvalidToolArguments,
    Tool,
    ToolContext,
    ToolOutcome,
    ToolSet,
    ToolSignatureError,
    current_tool_context,
)

CONTEXT = ToolContext(
    tool="refund",
    execution_key="exk_0123",
    run_id="run_abc",
    principal=Principal("ann", roles=("support",)),
    attempt=2,
)


# -- helpers ---------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _isolated_imports(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Give each test its own sys.path and forget the modules it imported."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


@pytest.fixture
def modname(tmp_path: Path) -> str:
    """A module name no other test uses."""
    return "hx_" + re.sub(r"\W", "_", tmp_path.name)


@pytest.fixture
def write_module(tmp_path: Path) -> Callable[[str, str], Path]:
    def write(name: str, source: str) -> Path:
        path = tmp_path.joinpath(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        return path

    return write


def make_spec(root: Path, tools: Mapping[str, Mapping[str, Any]]) -> Spec:
    """A `Spec` for `tools`, with a harness.yaml on disk and each key's line recorded."""
    lines = ["version: 1", "name: tools-test", "tools:"]
    locations: dict[tuple[str | int, ...], tuple[str, int]] = {}
    for name, body in tools.items():
        lines.append(f"  {name}:")
        locations[("tools", name)] = ("harness.yaml", len(lines))
        for key, value in body.items():
            lines.append(f"    {key}: {json.dumps(value)}")
            locations[("tools", name, key)] = ("harness.yaml", len(lines))
    lines += ["tasks:", "  t:", "    prompt: hi"]
    path = root / "harness.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    document = validate(
        SpecDocument,
        {
            "version": 1,
            "name": "tools-test",
            "tools": dict(tools),
            "tasks": {"t": {"prompt": "hi"}},
        },
    )
    return Spec(document=document, path=path, env=None, digest="x", locations=locations)


def spec_error(root: Path, ref: str) -> SpecError:
    """The `SpecError` that importing `ref` as tool `refund`'s call raises."""
    spec = make_spec(root, {"refund": {"call": ref}})
    with pytest.raises(SpecError) as info:
        import_callable(ref, spec=spec, where=("tools", "refund", "call"))
    assert info.value.file == "harness.yaml"
    assert info.value.line == 5
    assert info.value.key == "tools.refund.call"
    assert str(info.value).startswith("harness.yaml:5 tools.refund.call: ")
    return info.value


def invoke(tool: Tool, args: Mapping[str, Any], **kwargs: Any) -> ToolOutcome:
    return asyncio.run(tool.invoke(args, CONTEXT, **kwargs))


# -- import_callable -------------------------------------------------------------------------


def test_import_callable_resolves_a_function_next_to_the_spec(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(modname, "def refund(order_id: str) -> str:\n    return order_id\n")
    spec = make_spec(tmp_path, {"refund": {"call": f"{modname}:refund"}})
    fn = import_callable(f"{modname}:refund", spec=spec, where=("tools", "refund", "call"))
    assert fn("A-1") == "A-1"
    assert sys.path[0] == str(tmp_path.resolve())
    import_callable(f"{modname}:refund", spec=spec, where=("tools", "refund", "call"))
    assert sys.path.count(str(tmp_path.resolve())) == 1


def test_import_callable_resolves_packages_and_class_attributes(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(f"{modname}.__init__", "")
    write_module(
        f"{modname}.tools",
        """
        class Refunds:
            @staticmethod
            def make(amount: float) -> float:
                return amount * 2
        """,
    )
    spec = make_spec(tmp_path, {"refund": {"call": f"{modname}.tools:Refunds.make"}})
    fn = import_callable(f"{modname}.tools:Refunds.make", spec=spec, where=("tools",))
    assert fn(2) == 4


def test_a_module_written_after_an_earlier_import_from_the_same_folder_is_found(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    spec = make_spec(tmp_path, {})
    write_module(f"{modname}_a", "def a() -> int:\n    return 1\n")
    assert import_callable(f"{modname}_a:a", spec=spec, where=())() == 1
    write_module(f"{modname}_b", "def b() -> int:\n    return 2\n")
    assert import_callable(f"{modname}_b:b", spec=spec, where=())() == 2


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("shop.tools.refund", "'shop.tools.refund' is not a callable reference: write it as "),
        ("shop tools:refund", "'shop tools' is not a module path"),
        ("shop.tools:", "'' is not an attribute name"),
        (":refund", "'' is not a module path"),
    ],
)
def test_a_malformed_reference_names_the_value_and_the_expected_form(
    tmp_path: Path, ref: str, expected: str
) -> None:
    error = spec_error(tmp_path, ref)
    assert expected in error.reason
    assert "'package.module:function'" in error.reason


def test_a_missing_module_is_not_found(tmp_path: Path, modname: str) -> None:
    error = spec_error(tmp_path, f"{modname}_absent:refund")
    assert error.reason.startswith(f"module '{modname}_absent' not found (searched the spec's")
    assert str(tmp_path.resolve()) in error.reason


def test_a_missing_parent_package_is_named(tmp_path: Path, modname: str) -> None:
    error = spec_error(tmp_path, f"{modname}_absent.tools:refund")
    assert error.reason.startswith(
        f"module '{modname}_absent.tools' not found: there is no module '{modname}_absent'"
    )


def test_a_missing_module_inside_an_existing_package(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(f"{modname}.__init__", "")
    error = spec_error(tmp_path, f"{modname}.nothing:refund")
    assert error.reason.startswith(f"module '{modname}.nothing' not found (searched")


def test_a_nested_missing_import_is_not_reported_as_the_module_missing(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(modname, "import os\nimport hx_no_such_dependency\n")
    error = spec_error(tmp_path, f"{modname}:refund")
    assert error.reason == (
        f"importing '{modname}' raised ModuleNotFoundError: No module named "
        f"'hx_no_such_dependency' (at {modname}.py:2)"
    )
    assert isinstance(error.__cause__, ModuleNotFoundError)


def test_an_import_error_inside_the_module_is_reported(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(modname, "from os import hx_no_such_name\n")
    error = spec_error(tmp_path, f"{modname}:refund")
    assert error.reason.startswith(
        f"importing '{modname}' raised ImportError: cannot import name 'hx_no_such_name'"
    )
    assert error.reason.endswith(f"(at {modname}.py:1)")


def test_an_exception_while_importing_is_reported_with_its_place(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(modname, "RATE = 0.2\nraise ValueError('bad config')\n")
    error = spec_error(tmp_path, f"{modname}:refund")
    assert (
        error.reason == f"importing '{modname}' raised ValueError: bad config (at {modname}.py:2)"
    )


def test_an_error_raised_inside_a_library_points_at_the_applications_line(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(modname, "import json\nCONFIG = json.loads('{not json')\n")
    error = spec_error(tmp_path, f"{modname}:refund")
    assert error.reason.startswith(f"importing '{modname}' raised JSONDecodeError: Expecting")
    assert error.reason.endswith(f"(at {modname}.py:2)")


def test_a_module_that_exits_while_importing_is_reported(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(modname, "import sys\nsys.exit(3)\n")
    error = spec_error(tmp_path, f"{modname}:refund")
    assert error.reason == f"importing '{modname}' raised SystemExit: 3 (at {modname}.py:2)"


def test_a_syntax_error_is_reported_with_its_place(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(modname, "def refund(:\n    pass\n")
    error = spec_error(tmp_path, f"{modname}:refund")
    assert error.reason.startswith(f"importing '{modname}' raised SyntaxError: ")
    assert error.reason.endswith(f"(at {modname}.py:1)")


def test_a_missing_attribute_suggests_the_closest_public_callable(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(modname, "def refund(): ...\ndef lookup_order(): ...\n_refund_impl = 1\n")
    error = spec_error(tmp_path, f"{modname}:refnd")
    assert error.reason == f"module '{modname}' has no attribute 'refnd' (did you mean 'refund'?)"
    error = spec_error(tmp_path, f"{modname}:zzz")
    assert error.reason == (
        f"module '{modname}' has no attribute 'zzz' (known: lookup_order, refund)"
    )


def test_a_missing_class_attribute_suggests_the_closest_method(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(modname, "class Refunds:\n    def make(self): ...\n")
    error = spec_error(tmp_path, f"{modname}:Refunds.mak")
    assert error.reason == f"'{modname}:Refunds' has no attribute 'mak' (did you mean 'make'?)"


def test_an_attribute_that_is_not_callable_is_refused(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(modname, "RATE = 0.2\n")
    error = spec_error(tmp_path, f"{modname}:RATE")
    assert error.reason == f"'{modname}:RATE' is float 0.2, not a callable"


def test_a_module_named_as_the_attribute_is_refused(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(f"{modname}.__init__", "from . import tools\n")
    write_module(f"{modname}.tools", "")
    error = spec_error(tmp_path, f"{modname}:tools")
    assert error.reason.startswith(f"'{modname}:tools' is a module, not a callable")
    assert f"'{modname}.tools:<function>'" in error.reason


# -- schema derivation -----------------------------------------------------------------------


class Address(pydantic.BaseModel):
    street: str
    zip: int = 0


class Speed(enum.Enum):
    SLOW = "slow"
    FAST = "fast"


def test_schema_of_common_parameter_types() -> None:
    def ship(
        order_id: str,
        count: int,
        weight: float,
        gift: bool,
        tags: list[str],
        carrier: Literal["ups", "dhl"],
        address: Address,
        note: Optional[str] = None,  # noqa: UP045 - the spelling under test
        priority: int | None = 3,
        speed: Speed = Speed.SLOW,
    ) -> None:
        """Ship an order."""

    schema = Tool("ship", ship).schema
    assert schema.name == "ship"
    assert schema.description == "Ship an order."
    assert schema.parameters == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "order_id": {"type": "string"},
            "count": {"type": "integer"},
            "weight": {"type": "number"},
            "gift": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "carrier": {"type": "string", "enum": ["ups", "dhl"]},
            "address": {"$ref": "#/$defs/Address"},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "priority": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 3},
            "speed": {"$ref": "#/$defs/Speed", "default": "slow"},
        },
        "required": ["order_id", "count", "weight", "gift", "tags", "carrier", "address"],
        "$defs": {
            "Address": {
                "type": "object",
                "title": "Address",
                "properties": {
                    "street": {"type": "string"},
                    "zip": {"type": "integer", "default": 0},
                },
                "required": ["street"],
            },
            "Speed": {"type": "string", "enum": ["slow", "fast"], "title": "Speed"},
        },
    }
    json.dumps(schema.parameters)  # what providers send must be JSON


def test_schema_of_a_tool_without_parameters_or_docstring() -> None:
    schema = Tool("now", lambda: 1).schema
    assert schema.parameters == {"type": "object", "properties": {}, "additionalProperties": False}
    assert schema.description == ""


def test_unannotated_parameters_accept_anything() -> None:
    def echo(value, times=1):  # type: ignore[no-untyped-def]
        return [value] * times

    tool = Tool("echo", echo)
    assert tool.schema.parameters["properties"] == {"value": {}, "times": {"default": 1}}
    assert tool.schema.parameters["required"] == ["value"]
    assert invoke(tool, {"value": {"a": [1]}}).value == [{"a": [1]}]


def test_a_default_that_is_not_json_stays_out_of_the_schema_and_still_applies() -> None:
    sentinel = object()

    def probe(marker: Any = sentinel) -> bool:
        return marker is sentinel

    tool = Tool("probe", probe)
    assert tool.schema.parameters["properties"] == {"marker": {}}
    assert tool.validate({}) == {}  # omitted optionals stay omitted: the function's default applies
    assert invoke(tool, {}).value is True


def test_descriptions_from_a_google_docstring() -> None:
    def refund(order_id: str, amount: float, reason: str = "late") -> dict[str, Any]:
        """Refund an order.

        The money goes back to the card the order was paid with.

        Args:
            order_id: The order's id,
                e.g. A-1001.
            amount (float): Dollars to refund.

        Returns:
            A receipt.
        """
        return {}

    schema = Tool("refund", refund).schema
    assert schema.description == (
        "Refund an order.\n\nThe money goes back to the card the order was paid with."
    )
    props = schema.parameters["properties"]
    assert props["order_id"] == {"type": "string", "description": "The order's id, e.g. A-1001."}
    assert props["amount"] == {"type": "number", "description": "Dollars to refund."}
    assert props["reason"] == {"type": "string", "default": "late"}


def test_descriptions_from_a_numpy_docstring() -> None:
    def refund(order_id: str, amount: float = 0.0) -> None:
        """Refund an order.

        Parameters
        ----------
        order_id : str
            The order's id.
        amount : float, optional
            Dollars to refund.
        """

    schema = Tool("refund", refund).schema
    assert schema.description == "Refund an order."
    props = schema.parameters["properties"]
    assert props["order_id"]["description"] == "The order's id."
    assert props["amount"] == {
        "type": "number",
        "default": 0.0,
        "description": "Dollars to refund.",
    }


def test_descriptions_from_a_rest_docstring() -> None:
    def refund(order_id: str) -> None:
        """Refund an order.

        :param order_id: The order's id.
        :returns: nothing.
        """

    schema = Tool("refund", refund).schema
    assert schema.description == "Refund an order."
    assert schema.parameters["properties"]["order_id"]["description"] == "The order's id."


def test_a_field_description_in_the_annotation_wins_over_the_docstring() -> None:
    def refund(amount: Annotated[float, pydantic.Field(description="USD", gt=0)]) -> None:
        """Refund.

        Args:
            amount: Dollars.
        """

    props = Tool("refund", refund).schema.parameters["properties"]
    assert props["amount"] == {"type": "number", "exclusiveMinimum": 0, "description": "USD"}


def test_the_spec_description_wins_over_the_docstring() -> None:
    def refund(order_id: str) -> None:
        """Refund an order."""

    tool = Tool("refund", refund, ToolSpec(call="x:refund", description="Give money back."))
    assert tool.schema.description == "Give money back."


def test_string_annotations_are_resolved(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(
        modname,
        """
        from __future__ import annotations
        import dataclasses

        @dataclasses.dataclass
        class Item:
            sku: str
            qty: int = 1

        def order(items: list[Item], rush: bool | None = None) -> int:
            return sum(i.qty for i in items)
        """,
    )
    spec = make_spec(tmp_path, {"order": {"call": f"{modname}:order"}})
    tool = ToolSet.from_spec(spec).get("order")
    assert tool is not None
    assert tool.schema.parameters["properties"]["items"] == {
        "type": "array",
        "items": {"$ref": "#/$defs/Item"},
    }
    assert invoke(tool, {"items": [{"sku": "a", "qty": "2"}, {"sku": "b"}]}).value == 3


def test_callable_objects_and_partials_are_tools() -> None:
    class Greeter:
        """Greet someone."""

        async def __call__(self, name: str) -> str:
            return f"hi {name}"

    def scale(factor: int, value: int) -> int:
        """Scale a value."""
        return factor * value

    greeter = Tool("greet", Greeter())
    assert greeter.is_async
    assert greeter.schema.description == "Greet someone."
    assert invoke(greeter, {"name": "ann"}).text == "hi ann"
    doubled = Tool("double", functools.partial(scale, 2))
    assert not doubled.is_async
    assert doubled.schema.description == "Scale a value."
    assert list(doubled.schema.parameters["properties"]) == ["value"]
    assert invoke(doubled, {"value": 21}).value == 42


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def refund(*items): ...", "takes *items; tools receive their arguments as keyword"),
        ("def refund(a: int, **extra): ...", "takes **extra; tools receive their arguments as"),
        (
            "def refund(a, /, b): ...",
            "parameter 'a' of {mod}:refund is positional-only; tools receive their arguments as "
            "keyword arguments",
        ),
        (
            "class Db: ...\ndef refund(db: Db): ...",
            "parameter 'db' of {mod}:refund has type Db, which has no JSON schema",
        ),
        (
            "def refund(x: 'Missing'): ...",
            "cannot read the signature of {mod}:refund: NameError: name 'Missing' is not defined",
        ),
    ],
)
def test_a_callable_that_cannot_be_a_tool_is_a_spec_error_at_its_line(
    tmp_path: Path,
    modname: str,
    write_module: Callable[[str, str], Path],
    source: str,
    expected: str,
) -> None:
    write_module(modname, "def lookup(order_id: str): ...\n" + source + "\n")
    spec = make_spec(
        tmp_path,
        {"lookup": {"call": f"{modname}:lookup"}, "refund": {"call": f"{modname}:refund"}},
    )
    with pytest.raises(SpecError) as info:
        ToolSet.from_spec(spec)
    assert (info.value.file, info.value.line, info.value.key) == (
        "harness.yaml",
        7,
        "tools.refund.call",
    )
    assert expected.format(mod=modname) in info.value.reason
    assert not info.value.reason.startswith("tool 'refund'")  # the key path names it already


def test_a_bad_signature_outside_a_spec_raises_tool_signature_error() -> None:
    def refund(*args: Any) -> None: ...

    with pytest.raises(ToolSignatureError, match=r"^tool 'refund': .* takes \*args") as info:
        Tool("refund", refund)
    assert isinstance(info.value, TypeError)
    assert info.value.tool == "refund"


def test_an_import_error_stops_the_whole_toolset(tmp_path: Path, modname: str) -> None:
    spec = make_spec(tmp_path, {"refund": {"call": f"{modname}_absent:refund"}})
    with pytest.raises(SpecError, match=r"^harness\.yaml:5 tools\.refund\.call: module "):
        ToolSet.from_spec(spec)


# -- validation ------------------------------------------------------------------------------


def refund(order_id: str, amount: float, reason: Literal["damaged", "late"] = "late") -> str:
    """Refund an order."""
    return f"refunded {amount} on {order_id} ({reason})"


REFUND = Tool("refund", refund)


def test_validation_is_lax_for_llm_json() -> None:
    assert REFUND.validate({"order_id": 1001, "amount": "250"}) == {
        "order_id": "1001",
        "amount": 250.0,
    }

    def flags(on: bool, ids: list[int]) -> None: ...

    assert Tool("flags", flags).validate({"on": "true", "ids": ["1", 2]}) == {
        "on": True,
        "ids": [1, 2],
    }


def test_validation_builds_nested_models() -> None:
    def ship(address: Address) -> str:
        return address.street

    tool = Tool("ship", ship)
    validated = tool.validate({"address": {"street": "Main St", "zip": "12345"}})
    assert validated == {"address": Address(street="Main St", zip=12345)}
    assert invoke(tool, {"address": {"street": "Main St"}}).value == "Main St"


def test_validation_error_lists_bad_values_and_unexpected_names() -> None:
    with pytest.raises(InvalidToolArguments) as info:
        REFUND.validate({"order_id": "A-1", "amount": "lots", "ammount": 3})
    assert str(info.value) == (
        "invalid arguments for tool 'refund': amount: expected a number, got 'lots'; unexpected "
        "argument 'ammount' (did you mean 'amount'?)"
    )
    assert isinstance(info.value, ValueError)
    assert info.value.tool == "refund"
    assert len(info.value.problems) == 2


def test_validation_error_for_missing_and_literal_arguments() -> None:
    with pytest.raises(InvalidToolArguments) as info:
        REFUND.validate({"amount": 1, "reason": "lost", "zzz": 1})
    assert info.value.problems == (
        "missing required argument 'order_id'",
        "reason: expected 'damaged' or 'late', got 'lost'",
        "unexpected argument 'zzz' (known: amount, order_id, reason)",
    )


def test_validation_error_for_nested_values_and_long_values() -> None:
    def ship(ids: list[int], address: Address) -> None: ...

    with pytest.raises(InvalidToolArguments) as info:
        Tool("ship", ship).validate({"ids": [1, "x" * 200], "address": {"zip": 1}})
    first, second = info.value.problems
    assert first == "ids[1]: expected an integer, got '" + "x" * 76 + "..."
    assert second == "address.street: missing required field (got {'zip': 1})"


def test_validation_error_for_a_tool_without_parameters_and_for_non_mappings() -> None:
    tool = Tool("now", lambda: 1)
    with pytest.raises(InvalidToolArguments, match=r"unexpected argument 'x' \(the tool takes no"):
        tool.validate({"x": 1})
    with pytest.raises(
        InvalidToolArguments, match=r"arguments: expected an object, got \['A-1', 3\]"
    ):
        REFUND.validate(["A-1", 3])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("annotation", "value", "expected"),
    [
        (int, "abc", "n: expected an integer, got 'abc'"),
        (int, 1.5, "n: expected a whole number, got 1.5"),
        (bool, "maybe", "n: expected true or false, got 'maybe'"),
        (str, [1], "n: expected a string, got [1]"),
        (list[int], "x", "n: expected a list, got 'x'"),
        (Annotated[int, pydantic.Field(gt=0)], 0, "n: expected a number greater than 0, got 0"),
        (
            Annotated[str, pydantic.Field(max_length=2)],
            "abc",
            "n: expected a string of at most 2 characters, got 'abc'",
        ),
    ],
)
def test_type_errors_read_plainly(annotation: Any, value: Any, expected: str) -> None:
    def tool(n): ...  # type: ignore[no-untyped-def]

    tool.__annotations__ = {"n": annotation, "return": None}
    with pytest.raises(InvalidToolArguments) as info:
        Tool("t", tool).validate({"n": value})
    assert info.value.problems == (expected,)


def test_bad_arguments_come_back_as_an_outcome_and_the_tool_does_not_run() -> None:
    calls: list[Any] = []

    def charge(amount: float) -> None:
        calls.append(amount)

    outcome = invoke(Tool("charge", charge), {"amount": "lots"})
    assert not outcome.ok
    assert outcome.kind == "invalid_arguments"
    assert outcome.value is None
    assert (
        outcome.text == "invalid arguments for tool 'charge': amount: expected a number, got 'lots'"
    )
    assert outcome.error == {"type": "InvalidToolArguments", "message": outcome.text}
    assert calls == []


# -- invocation ------------------------------------------------------------------------------


@dataclasses.dataclass
class Receipt:
    order_id: str
    at: dt.datetime


class Unserialisable:
    def __repr__(self) -> str:
        return "<Unserialisable>"


@pytest.mark.parametrize(
    ("result", "value", "text"),
    [
        ("refunded", "refunded", "refunded"),
        ("", "", ""),
        (None, None, "null"),
        (42, 42, "42"),
        (
            {"ok": True, "naïve": "café"},
            {"ok": True, "naïve": "café"},
            '{"ok":true,"naïve":"café"}',
        ),
        ((1, 2), [1, 2], "[1,2]"),
        (
            Receipt("A-1", dt.datetime(2024, 5, 1, 12, 30)),
            {"order_id": "A-1", "at": "2024-05-01T12:30:00"},
            '{"order_id":"A-1","at":"2024-05-01T12:30:00"}',
        ),
        (Address(street="Main"), {"street": "Main", "zip": 0}, '{"street":"Main","zip":0}'),
        (dt.date(2024, 5, 1), "2024-05-01", '"2024-05-01"'),
        ({"x": Unserialisable()}, {"x": "<Unserialisable>"}, '{"x":"<Unserialisable>"}'),
        # strict JSON (what the store keeps) has no NaN or infinities
        (float("nan"), "nan", '"nan"'),
        (
            {"a": [float("inf"), -float("inf"), 1.5]},
            {"a": ["inf", "-inf", 1.5]},
            '{"a":["inf","-inf",1.5]}',
        ),
        # nor can any JSON reader take an integer longer than str()'s limit back
        pytest.param(10**5000, hex(10**5000), f'"{hex(10**5000)}"', id="huge-int"),
        pytest.param(
            {"n": [-(10**4400), 7]},
            {"n": [hex(-(10**4400)), 7]},
            f'{{"n":["{hex(-(10**4400))}",7]}}',
            id="huge-int-inside",
        ),
    ],
)
def test_a_result_becomes_json_for_the_store_and_text_for_the_model(
    result: Any, value: Any, text: str
) -> None:
    outcome = invoke(Tool("t", lambda: result), {})
    assert outcome == ToolOutcome(ok=True, kind="ok", value=value, text=text, error=None)


def test_a_result_that_cannot_be_serialised_at_all_is_its_repr() -> None:
    loop: list[Any] = []
    loop.append(loop)
    outcome = invoke(Tool("t", lambda: loop), {})
    assert outcome.ok
    assert outcome.value == outcome.text == "[[...]]"


def test_sync_and_async_tools_get_their_arguments_by_keyword() -> None:
    async def arefund(order_id: str, amount: float) -> str:
        await asyncio.sleep(0)
        return f"{order_id}:{amount}"

    assert invoke(REFUND, {"amount": 5, "order_id": "A-1"}).text == "refunded 5.0 on A-1 (late)"
    assert invoke(Tool("arefund", arefund), {"amount": 5, "order_id": "A-1"}).text == "A-1:5.0"


def test_a_sync_function_that_returns_an_awaitable_is_awaited() -> None:
    async def later() -> str:
        return "later"

    def wrapper() -> Any:
        return later()

    assert invoke(Tool("w", wrapper), {}).value == "later"
    assert invoke(Tool("w", wrapper, ToolSpec(call="x:w", timeout=1)), {}).value == "later"


def test_a_tool_that_raises_comes_back_as_an_error_outcome() -> None:
    def explode(reason: str) -> None:
        raise RuntimeError(f"card declined: {reason}")

    outcome = invoke(Tool("explode", explode), {"reason": "expired"})
    assert outcome == ToolOutcome(
        ok=False,
        kind="error",
        value=None,
        text="tool 'explode' raised RuntimeError: card declined: expired",
        error={"type": "RuntimeError", "message": "card declined: expired"},
    )


@pytest.mark.parametrize("timeout", [None, 1.0])
def test_a_tool_that_exits_or_raises_a_base_exception_comes_back_as_an_error(
    timeout: float | None,
) -> None:
    """`sys.exit()` in a tool, or a `BaseException` of its own, is its answer: the process goes
    on and the run with it. Ctrl-C is not a tool's answer and goes through."""

    class Stop(BaseException):
        pass

    def exits() -> None:
        sys.exit(4)

    async def stops() -> None:
        raise Stop("stop")

    def interrupted() -> None:
        raise KeyboardInterrupt

    spec = None if timeout is None else ToolSpec(call="x:t", timeout=timeout)
    made = [
        Tool(name, fn) if spec is None else Tool(name, fn, spec)
        for name, fn in [("exits", exits), ("stops", stops), ("interrupted", interrupted)]
    ]
    exited, stopped = invoke(made[0], {}), invoke(made[1], {})
    assert (exited.kind, exited.text, exited.error) == (
        "error",
        "tool 'exits' raised SystemExit: 4",
        {"type": "SystemExit", "message": "4"},
    )
    assert (stopped.kind, stopped.text) == ("error", "tool 'stops' raised Stop: stop")
    with pytest.raises(KeyboardInterrupt):
        invoke(made[2], {})


def test_a_result_that_is_not_valid_unicode_is_an_error_naming_the_character() -> None:
    """A lone surrogate (bytes decoded with `surrogateescape`) cannot be stored as UTF-8."""

    def listing() -> str:
        return b"caf\xe9.txt".decode("utf-8", "surrogateescape")

    def complains() -> None:
        raise ValueError("bad name " + b"\xff".decode("utf-8", "surrogateescape"))

    outcome = invoke(Tool("listing", listing), {})
    assert outcome.kind == "error" and outcome.error is not None
    assert outcome.text.startswith(
        "tool 'listing' returned text that is not valid Unicode in its result: \\udce9 at character"
    )
    assert outcome.text.isascii()
    raised = invoke(Tool("complains", complains), {})
    assert raised.kind == "error" and "in the error it raised: \\udcff" in raised.text
    assert invoke(Tool("fine", lambda: "café"), {}).text == "café"


def test_an_exception_without_a_message_is_named() -> None:
    async def explode() -> None:
        raise KeyError

    outcome = invoke(Tool("explode", explode, ToolSpec(call="x:e", timeout=1)), {})
    assert outcome.kind == "error"
    assert outcome.text == "tool 'explode' raised KeyError"
    assert outcome.error == {"type": "KeyError", "message": ""}


def test_a_timeout_error_the_tool_raises_is_an_error_not_a_timeout() -> None:
    async def upstream() -> None:
        raise TimeoutError("upstream took too long")

    outcome = invoke(Tool("up", upstream, ToolSpec(call="x:up", timeout=5)), {})
    assert outcome.kind == "error"
    assert outcome.error == {"type": "TimeoutError", "message": "upstream took too long"}


def test_an_async_tool_that_takes_too_long_times_out() -> None:
    async def slow() -> str:
        await asyncio.sleep(5)
        return "slept"

    started = time.perf_counter()
    outcome = invoke(Tool("slow", slow, ToolSpec(call="x:slow", timeout=0.05)), {})
    assert time.perf_counter() - started < 1
    assert outcome == ToolOutcome(
        ok=False,
        kind="timeout",
        value=None,
        text="tool 'slow' timed out after 0.05s",
        error={"type": "TimeoutError", "message": "tool 'slow' timed out after 0.05s"},
    )


@pytest.mark.asyncio
async def test_a_sync_tool_with_a_timeout_runs_in_a_thread_and_times_out() -> None:
    release = threading.Event()

    def blocking() -> str:
        release.wait(5)
        return "done"

    tool = Tool("blocking", blocking, ToolSpec(call="x:b", timeout=0.05))
    started = time.perf_counter()
    try:
        outcome = await tool.invoke({}, CONTEXT)
        assert time.perf_counter() - started < 1
    finally:
        release.set()  # the thread outlives the timeout; let it finish
    assert outcome.kind == "timeout"
    assert outcome.text == "tool 'blocking' timed out after 0.05s"


def test_sync_tools_run_in_a_worker_thread_with_or_without_a_timeout() -> None:
    def where() -> int:
        return threading.get_ident()

    here = threading.get_ident()
    assert invoke(Tool("where", where), {}).value != here
    assert invoke(Tool("where", where, ToolSpec(call="x:w", timeout=1)), {}).value != here
    assert invoke(Tool("where", where), {}, overall_timeout=1).value != here


def test_the_runs_deadline_stops_a_tool() -> None:
    async def slow() -> str:
        await asyncio.sleep(5)
        return "slept"

    no_timeout = Tool("slow", slow)
    long_timeout = Tool("slow", slow, ToolSpec(call="x:slow", timeout=10))
    for tool in (no_timeout, long_timeout):
        outcome = invoke(tool, {}, overall_timeout=0.05)
        assert outcome.kind == "deadline"
        assert outcome.text == "tool 'slow' was stopped after 0.05s: the run's deadline passed"
        assert outcome.error == {"type": "TimeoutError", "message": outcome.text}


def test_the_tools_own_timeout_applies_when_it_is_shorter_than_the_deadline() -> None:
    async def slow() -> None:
        await asyncio.sleep(5)

    outcome = invoke(Tool("slow", slow, ToolSpec(call="x:s", timeout=0.05)), {}, overall_timeout=9)
    assert outcome.kind == "timeout"


def test_a_deadline_that_has_passed_does_not_call_the_tool() -> None:
    calls: list[int] = []
    outcome = invoke(Tool("t", lambda: calls.append(1)), {}, overall_timeout=0)
    assert outcome.kind == "deadline"
    assert outcome.text == "tool 't' was not called: the run's deadline has passed"
    assert calls == []


def test_a_fast_tool_finishes_within_its_timeout() -> None:
    async def quick() -> str:
        return "quick"

    tool = Tool("quick", quick, ToolSpec(call="x:q", timeout=1))
    assert invoke(tool, {}, overall_timeout=1) == ToolOutcome.success("quick")


@pytest.mark.asyncio
async def test_cancelling_an_invocation_propagates() -> None:
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await asyncio.sleep(5)

    for spec in (ToolSpec(call="x:s"), ToolSpec(call="x:s", timeout=10)):
        task = asyncio.create_task(Tool("slow", slow, spec).invoke({}, CONTEXT))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        started.clear()


# -- current_tool_context --------------------------------------------------------------------


def test_current_tool_context_outside_a_tool_call_raises() -> None:
    with pytest.raises(HarnessError, match=r"^current_tool_context\(\) was called outside a tool"):
        current_tool_context()


def test_current_tool_context_inside_sync_async_and_threaded_tools() -> None:
    def sync_tool() -> str:
        return current_tool_context().execution_key

    async def async_tool() -> str:
        inner = asyncio.create_task(asyncio.sleep(0, current_tool_context()))
        context = await inner
        return f"{context.run_id}/{context.principal.id}/{context.attempt}"

    assert invoke(Tool("s", sync_tool), {}).value == "exk_0123"
    assert invoke(Tool("s", sync_tool, ToolSpec(call="x:s", timeout=1)), {}).value == "exk_0123"
    assert invoke(Tool("a", async_tool), {}).value == "run_abc/ann/2"
    assert (
        invoke(Tool("a", async_tool, ToolSpec(call="x:a", timeout=1)), {}).value == "run_abc/ann/2"
    )
    with pytest.raises(HarnessError):
        current_tool_context()  # reset after each call


@pytest.mark.asyncio
async def test_the_context_is_reset_after_failures_and_separate_between_concurrent_calls() -> None:
    def explode() -> None:
        raise ValueError(current_tool_context().tool)

    outcome = await Tool("explode", explode).invoke({}, CONTEXT)
    assert outcome.error == {"type": "ValueError", "message": "refund"}
    with pytest.raises(HarnessError):
        current_tool_context()

    async def which() -> str:
        await asyncio.sleep(0.01)
        return current_tool_context().execution_key

    tool = Tool("which", which)
    contexts = [dataclasses.replace(CONTEXT, execution_key=f"exk_{i}") for i in range(5)]
    outcomes = await asyncio.gather(*(tool.invoke({}, c) for c in contexts))
    assert [o.value for o in outcomes] == [f"exk_{i}" for i in range(5)]


def test_tool_context_is_a_frozen_value() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        CONTEXT.attempt = 3  # type: ignore[misc]
    assert (
        ToolContext(tool="t", execution_key="k", run_id="r", principal=Principal("a")).attempt == 1
    )


# -- outcomes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "outcome",
    [
        ToolOutcome.success({"order_id": "A-1", "amount": 250.0}),
        ToolOutcome.success("plain text"),
        ToolOutcome.failure(
            "error", "tool 'x' raised ValueError: v", type="ValueError", message="v"
        ),
        ToolOutcome(ok=False, kind="denied", value=None, text="Denied", error=None),
    ],
)
def test_outcomes_round_trip_through_json(outcome: ToolOutcome) -> None:
    stored = json.loads(json.dumps(outcome.to_dict()))
    assert stored == outcome.to_dict()
    assert ToolOutcome.from_dict(stored) == outcome


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "a tool outcome must be a mapping"),
        ({"ok": True, "kind": "sideways", "text": ""}, "tool outcome has kind 'sideways'"),
        ({"ok": True, "kind": "error", "text": ""}, "of kind 'error' cannot have ok=True"),
        ({"ok": True, "kind": "ok", "text": None}, "text must be a string"),
        ({"ok": False, "kind": "error", "text": "", "error": "x"}, "error must be {type, message}"),
    ],
)
def test_a_malformed_stored_outcome_is_refused(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ToolOutcome.from_dict(data)


# -- ToolSet ---------------------------------------------------------------------------------


def test_toolset_from_spec(
    tmp_path: Path, modname: str, write_module: Callable[[str, str], Path]
) -> None:
    write_module(
        modname,
        '''
        def lookup_order(order_id: str) -> dict:
            """Look an order up."""
            return {"order_id": order_id}

        async def refund(order_id: str, amount: float) -> str:
            """Refund an order."""
            return "ok"
        ''',
    )
    spec = make_spec(
        tmp_path,
        {
            "lookup_order": {"call": f"{modname}:lookup_order", "replay": "safe"},
            "refund": {"call": f"{modname}:refund", "replay": "idempotent", "timeout": "20s"},
        },
    )
    tools = ToolSet.from_spec(spec)
    assert tools.names() == ("lookup_order", "refund")
    assert len(tools) == 2 and "refund" in tools and "nope" not in tools
    assert [t.name for t in tools] == ["lookup_order", "refund"]
    refund_tool = tools.get("refund")
    assert refund_tool is not None and refund_tool.is_async
    assert refund_tool.spec.timeout == 20.0
    assert tools.get("nope") is None
    schemas = tools.schemas(["refund", "lookup_order"])
    assert [s.name for s in schemas] == ["refund", "lookup_order"]
    assert schemas[1].description == "Look an order up."
    assert tools.schemas(("refund", "lookup_order")) is schemas  # cached per tuple of names
    assert tools.schemas([]) == ()
    with pytest.raises(KeyError, match=r"unknown tool 'refnd' \(did you mean 'refund'\?\)"):
        tools.schemas(["refnd"])


def test_toolset_refuses_two_tools_of_one_name() -> None:
    with pytest.raises(ValueError, match="two tools are named 'refund'"):
        ToolSet([REFUND, Tool("refund", refund)])


def test_a_tool_built_in_python_gets_a_default_spec() -> None:
    assert REFUND.spec == ToolSpec(call=f"{__name__}:refund")
    assert repr(REFUND) == f"Tool('refund', '{__name__}:refund')"
