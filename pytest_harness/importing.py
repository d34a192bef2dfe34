"""Resolve `"package.module:function"` references from a spec to Python callables.

Tools, guard callables and the `function` model provider name their code this way. Every failure
is a `SpecError` at the line of the key that holds the reference, and says which of the possible
things went wrong: a malformed reference, a module that does not exist, a module that exists but
raised while importing, a missing attribute, or an attribute that is not callable.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pytest_harness.errors import did_you_mean

if TYPE_CHECKING:
    from pytest_harness.spec.spec import KeyPath, Spec

__all__ = ["import_callable"]

_FORM = "write it as 'package.module:function' (a module path, a colon, then the attribute)"
_MAX_LISTED = 12
"""Above this many candidates, a missing attribute names only a close match, not them all."""


def import_callable(ref: str, *, spec: Spec, where: KeyPath) -> Callable[..., Any]:
    """Import the callable `ref` names (`"pkg.mod:func"` or `"pkg.mod:Class.method"`).

    The spec's folder goes to the front of `sys.path` (when absent) so an application's modules
    next to `harness.yaml` import; any failure is a `SpecError` at `where`.
    """
    module_name, attrs = _split(ref, spec=spec, where=where)
    module = _import_module(module_name, spec=spec, where=where)
    obj: Any = module
    for depth, attr in enumerate(attrs):
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            owner = (
                f"module {module_name!r}"
                if depth == 0
                else repr(f"{module_name}:{'.'.join(attrs[:depth])}")
            )
            hint = _close(attr, _public_callables(obj))
            raise spec.error(f"{owner} has no attribute {attr!r}{hint}", where) from None
        except Exception as exc:  # a module-level __getattr__ or a property that raised
            raise spec.error(
                f"getting {attr!r} from {module_name!r} raised {_describe(exc)}", where
            ) from exc
    if not callable(obj):
        raise spec.error(_not_callable(ref, obj), where)
    return obj  # type: ignore[no-any-return]


def _split(ref: object, *, spec: Spec, where: KeyPath) -> tuple[str, list[str]]:
    if not isinstance(ref, str):
        raise spec.error(f"expected a callable reference, got {ref!r}: {_FORM}", where)
    module_name, colon, attr_path = ref.strip().partition(":")
    if not colon:
        raise spec.error(f"{ref!r} is not a callable reference: {_FORM}", where)
    modules = module_name.split(".")
    attrs = attr_path.split(".")
    if not all(part.isidentifier() for part in modules):
        raise spec.error(
            f"{ref!r} is not a callable reference: {module_name!r} is not a module path; {_FORM}",
            where,
        )
    if not all(part.isidentifier() for part in attrs):
        raise spec.error(
            f"{ref!r} is not a callable reference: {attr_path!r} is not an attribute name; {_FORM}",
            where,
        )
    return module_name, attrs


def _import_module(name: str, *, spec: Spec, where: KeyPath) -> ModuleType:
    root = str(spec.root.resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    for attempt in (1, 2):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if not _is_missing(name, exc):
                raise spec.error(
                    f"importing {name!r} raised {_describe(exc)}{_origin(exc, spec.root)}", where
                ) from exc
            if attempt == 1:
                # A module written moments ago may be hidden by a stale directory cache.
                importlib.invalidate_caches()
                continue
            missing = exc.name or name
            what = (
                f"module {name!r} not found"
                if missing == name
                else f"module {name!r} not found: there is no module {missing!r}"
            )
            raise spec.error(
                f"{what} (searched the spec's folder {root} and sys.path); check the spelling, "
                "or install the package that provides it",
                where,
            ) from None
        except (Exception, SystemExit) as exc:  # SystemExit: a script's sys.exit() at import
            raise spec.error(
                f"importing {name!r} raised {_describe(exc)}{_origin(exc, spec.root)}", where
            ) from exc
    raise AssertionError("unreachable")  # pragma: no cover


def _is_missing(name: str, exc: ModuleNotFoundError) -> bool:
    """Tell whether `exc` says `name` (or a package on its path) is absent: not a nested import."""
    return exc.name is not None and (name == exc.name or name.startswith(exc.name + "."))


def _describe(exc: BaseException) -> str:
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _origin(exc: BaseException, root: Path) -> str:
    """Return ` (at shop/tools.py:3)`: where an import raised, relative to the spec's folder.

    That is the innermost frame in the application's own files when there is one, else the
    innermost frame (a library's).
    """
    root = root.resolve()
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        places = [(exc.filename, exc.lineno)]
    else:
        places = [
            (frame.filename, frame.lineno)
            for frame in traceback.extract_tb(exc.__traceback__)
            if not frame.filename.startswith("<") and frame.lineno is not None
        ]
    if not places:
        return ""
    shown = []
    for file, line in places:
        with contextlib.suppress(ValueError, OSError):
            file = str(Path(file).resolve().relative_to(root))
            shown.append((file, line))
    file, line = shown[-1] if shown else places[-1]
    return f" (at {file}:{line})"


def _public_callables(obj: object) -> list[str]:
    names = vars(obj) if isinstance(obj, ModuleType) else {n: None for n in dir(obj)}
    out = []
    for name in names:
        if name.startswith("_"):
            continue
        try:
            if callable(getattr(obj, name)):
                out.append(name)
        except Exception:  # an attribute that raises is no suggestion
            continue
    return out


def _close(name: str, candidates: Iterable[str]) -> str:
    names = list(candidates)
    if len(names) > _MAX_LISTED:
        names = difflib.get_close_matches(name, names, n=1)
    return did_you_mean(name, names)


def _not_callable(ref: str, obj: object) -> str:
    if isinstance(obj, ModuleType):
        return (
            f"{ref!r} is a module, not a callable; name a function in it, "
            f"e.g. '{obj.__name__}:<function>'"
        )
    shown = repr(obj)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{ref!r} is {type(obj).__name__} {shown}, not a callable"
