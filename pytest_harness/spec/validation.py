"""Pydantic over the spec's dataclasses: validate a document into them, dump them back.

The dataclasses of `spec.schema` carry their constraints as `Annotated` metadata and their
pydantic config as `__pydantic_config__`; pydantic validates them as it would its own models
(one `TypeAdapter` per class, built on first use). Only the loader and the commands that edit
specs (`mutate`) import this module: the runtime reads the dataclasses and never needs it.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

__all__ = ["ValidationError", "dump", "field_types", "validate"]

T = TypeVar("T")


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(tp: Any) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(tp)
    if adapter is None:
        adapter = _ADAPTERS[tp] = TypeAdapter(tp)
    return adapter


def validate(tp: type[T], data: Any) -> T:
    """`data` validated into `tp` (a spec dataclass or a pydantic model); `ValidationError`."""
    value: T = _adapter(tp).validate_python(data)
    return value


def dump(value: Any, *, exclude_defaults: bool = True, exclude: set[str] | None = None) -> Any:
    """`value` as JSON data, keys as written in the file, defaults left out unless asked."""
    return _adapter(type(value)).dump_python(
        value, mode="json", by_alias=True, exclude_defaults=exclude_defaults, exclude=exclude
    )


def field_types(tp: Any) -> dict[str, Any] | None:
    """The keys a mapping validated as `tp` may hold (as written), each with its type.

    None when `tp` is neither a dataclass nor a pydantic model.
    """
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return {f.alias or name: f.annotation for name, f in tp.model_fields.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        config = getattr(tp, "__pydantic_config__", None) or {}
        alias: Callable[[str], str] = config.get("alias_generator") or (lambda name: name)
        hints = typing.get_type_hints(tp)
        return {alias(f.name): hints[f.name] for f in dataclasses.fields(tp)}
    return None
