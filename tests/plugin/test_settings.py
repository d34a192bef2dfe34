"""`Settings.show`: how messages name a file (relative to the rootdir when inside it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_harness.plugin.settings import Settings


def settings(root: Path) -> Settings:
    return Settings(rootpath=root, spec=root / "harness.yaml", env="offline", recordings=root)


def by_pathlib(path: str, root: Path) -> str:
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(root).as_posix()
    except ValueError:
        return str(absolute)


@pytest.mark.parametrize("root", ["/srv/app", "/", "/srv"])
@pytest.mark.parametrize(
    "path",
    [
        "/srv/app/recordings/x.yaml",
        "/srv/app",
        "/srv/app/",
        "/srv/apple/x.yaml",  # shares the root's name as a prefix: outside
        "/srv/app/a/../b.yaml",
        "/srv/app//a.yaml",
        "//srv/app/x.yaml",
        "/elsewhere/x.yaml",
        "relative/x.yaml",
        "/",
    ],
)
def test_show_names_a_file_as_its_path_relative_to_the_rootdir(path: str, root: str) -> None:
    assert settings(Path(root)).show(path) == by_pathlib(path, Path(root))


def test_show_is_relative_inside_the_rootdir_and_absolute_outside() -> None:
    s = settings(Path("/srv/app"))
    assert s.show(Path("/srv/app/recordings/test_x/a.yaml")) == "recordings/test_x/a.yaml"
    assert s.show("/srv/apple/a.yaml") == "/srv/apple/a.yaml"
    assert s.show("/srv/app") == "."
