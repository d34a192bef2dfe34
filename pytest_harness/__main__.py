"""`python -m pytest_harness`: the `pytest-harness` console script."""

import sys

from pytest_harness.cli import main

sys.exit(main())
