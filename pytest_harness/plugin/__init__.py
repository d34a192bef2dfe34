"""The pytest plugin's parts, imported by `pytest_harness.pytest_plugin` when they are needed.

`settings` (options, ini, marker), `items` (recording files as test items), `fixtures` (the
`harness` fixtures), `golden` (writing golden runs), `render` (how a drifted item reads),
`summary` (the terminal summary and the JSON report), `async_support` (async fixture support).
"""
