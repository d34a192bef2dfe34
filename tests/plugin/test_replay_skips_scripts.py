"""`--replay-recordings FOLDER` passes over a model script in its `match:` form, as over a list."""

from __future__ import annotations

from .conftest import Project

SCRIPT = """\
# turns picked by the run's input, as fixtures/shop/scripts/offline.yaml has them
match:
  - input: "Refund*"
    turns:
      - {call: refund, args: {order_id: A-1, amount: 5}}
      - say: Done.
  - turns: [{say: hi}]
"""


def test_a_match_script_kept_among_the_recordings_is_skipped_not_an_error(
    project: Project,
) -> None:
    project.tests()
    project.run("--record-recordings=all").assert_outcomes(passed=4)
    (project.recordings / "test_desk" / "offline.yaml").write_text(SCRIPT, encoding="utf-8")
    result = project.run("--replay-recordings", "-rs")
    result.assert_outcomes(passed=4, skipped=1)
    result.stdout.fnmatch_lines(
        ["SKIPPED * recordings/test_desk/offline.yaml: a model script, not a recording"]
    )
    assert "format must be" not in result.stdout.str()
