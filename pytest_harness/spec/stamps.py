"""Code stamps: what a cache's key holds of the code that made an entry.

The spec cache (`spec/cache.py`) and the plain tools' schema cache (`tools/plain.py`) keep
what code derived, like `.pyc` files; an entry is good only while that code is unchanged. Its
key holds the pytest-harness version, the Python, the size and mtime of the package's modules
that decide the entry, and those of each installed library's files, found without importing
the library. An edited, upgraded or downgraded file gives another stamp: a miss.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

__all__ = ["code_stamp", "library_stamp"]


def code_stamp(modules: Iterable[str], libraries: Iterable[str]) -> list[Any]:
    """The version, the Python, each of `modules` (paths under the package) and `libraries`."""
    import pytest_harness

    root = os.path.dirname(pytest_harness.__file__)
    stamp: list[Any] = [pytest_harness.__version__, list(sys.version_info[:3])]
    stamp.extend(_file_stamp(os.path.join(root, name), name) for name in modules)
    stamp.extend(library_stamp(name) for name in libraries)
    return stamp


def library_stamp(name: str) -> list[Any]:
    """An installed library's place and files (name, size, mtime), found without importing it.

    A package: its folder and every entry directly in it (a subfolder by its own mtime); a
    module: its file; not installed: `[name, None]`. The place counts too, so a library
    installed elsewhere (another environment, where mtimes may be normalised) is a miss.
    """
    import importlib.util

    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        found = None
    if found is None or found.origin is None:
        return [name, None]
    if found.submodule_search_locations:  # a package: every file in its folder
        folder = os.path.dirname(found.origin)
        try:
            files = sorted(e for e in os.listdir(folder) if not e.startswith("__pycache__"))
        except OSError:
            return [name, None]
        paths = [os.path.join(folder, e) for e in files]
    else:
        paths = [found.origin]
    return [name, found.origin, *(_file_stamp(path, os.path.basename(path)) for path in paths)]


def _file_stamp(path: str, name: str) -> list[Any]:
    """`[name, size, mtime]` of the file at `path`; `[name, None, None]` when it is not there."""
    try:
        info = os.stat(path)
    except OSError:
        return [name, None, None]
    return [name, info.st_size, info.st_mtime_ns]
