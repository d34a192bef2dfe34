"""The mutation corpus, continued: the credit desk with more of the spec in play.

The desk of `test_mutation_corpus` grows what its spec there does not exercise: `redact`
guards on the input and on tool results (one a callable of the tools module). Its runs are
recorded once; each mutation is replayed against them with the default fail-on set, and
must flag exactly the recordings whose runs it changes, as in the first corpus.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import pytest_harness as ph
from tests.replay.test_mutation_corpus import (
    DEFAULT_SCRIPT,
    NEEDS_APPROVAL,
    RUNS,
    SPEC,
    SUPERVISOR,
    TOOLS,
    App,
    Mutation,
    Outcome,
    edit,
    forget,
    make_app,
    verdict,
)

MORE_TOOLS = (
    TOOLS
    + '''

def mask_cards(text, context):
    """Mask card numbers but their last four digits (None: no card in the text)."""
    import re

    masked = re.sub(r"\\b\\d{12}(\\d{4})\\b", r"************\\1", text)
    return masked if masked != text else None
'''
)

MORE_SPEC = edit(
    "  - id: injection\n",
    "  - id: mask-cards\n"
    "    on: tool_result\n"
    "    check: MOD:mask_cards\n"
    "    action: redact\n"
    "  - id: hush-words\n"
    "    on: input\n"
    "    check: contains\n"
    "    text: hush\n"
    "    ignore_case: true\n"
    "    action: redact\n"
    "  - id: injection\n",
)(SPEC)

MORE_SCRIPT = (
    DEFAULT_SCRIPT
    + """\
  - input: "Whisper*"
    turns:
      - {say: "Kept."}
"""
)

MORE_RUNS = {**RUNS, "hush": "Whisper: HUSH is the word."}


def make_more_app(root: Path, spec: str = MORE_SPEC, tools: str = MORE_TOOLS) -> App:
    app = make_app(root, spec, tools)
    (app.root / "scripts" / "default.yaml").write_text(MORE_SCRIPT, encoding="utf-8")
    return app


async def _record(app: App, folder: Path) -> dict[str, Path]:
    paths = {}
    async with ph.load(app.spec, record=True) as harness:
        for name, text in MORE_RUNS.items():
            result = await harness.run("desk", text, principal="ann")
            if name in NEEDS_APPROVAL:
                assert result.approval is not None, name
                result = await harness.approve(
                    result.run_id, result.approval.approval_id, "approve", approver=SUPERVISOR
                )
            paths[name] = await harness.export(result.run_id, folder / f"{name}.yaml")
    return paths


@pytest.fixture(scope="module")
def more_goldens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("desk-more")
    app = make_more_app(root / "app")
    try:
        paths = asyncio.run(_record(app, root / "recordings"))
    finally:
        forget(app)
    yield paths


def replay_mutant(root: Path, goldens: dict[str, Path], spec: str, tools: str) -> Outcome:
    app = make_more_app(root, spec, tools)

    async def run() -> Outcome:
        reports = {}
        async with ph.load(app.spec) as harness:
            for name, path in goldens.items():
                reports[name] = await harness.replay(path)
        return Outcome({n: verdict(r) for n, r in reports.items()}, reports)

    try:
        return asyncio.run(run())
    finally:
        forget(app)


MUTATIONS = [
    Mutation("unchanged spec"),
    Mutation(
        "tool-result redaction masks every digit (mask_cards, code)",
        tools=edit('r"************\\1"', 'r"****************"'),
        flags=frozenset({"small_credit", "card_number"}),
    ),
    Mutation(
        "input redaction given a second text (hush-words: [hush, word])",
        spec=edit("    text: hush\n", "    text: [hush, word]\n"),
        flags=frozenset({"hush"}),
    ),
    Mutation(
        "input redaction made case-sensitive (hush-words ignore_case removed)",
        spec=edit("    ignore_case: true\n    action: redact\n", "    action: redact\n"),
        flags=frozenset({"hush"}),
    ),
    Mutation(
        "tool-result redaction narrowed to another tool (mask-cards tools: [close_ticket])",
        spec=edit(
            "    check: MOD:mask_cards\n", "    check: MOD:mask_cards\n    tools: [close_ticket]\n"
        ),
        flags=frozenset({"small_credit", "card_number"}),
    ),
]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_every_behaviour_change_is_flagged_and_nothing_else(
    mutation: Mutation, more_goldens: dict[str, Path], tmp_path: Path
) -> None:
    outcome = replay_mutant(
        tmp_path / "mutant",
        more_goldens,
        mutation.spec(MORE_SPEC),
        mutation.tools(MORE_TOOLS),
    )
    shown = {
        n: (v, outcome.reports[n].render()) for n, v in outcome.verdicts.items() if v != "same"
    }
    assert outcome.flagged() == set(mutation.flags or ()), shown
    for name in mutation.flags or ():
        assert outcome.reports[name].failed()  # fails the default gate, not only reported


def test_a_changed_redaction_names_the_guard_and_the_digest_of_what_it_left(
    more_goldens: dict[str, Path], tmp_path: Path
) -> None:
    tools = MUTATIONS[1].tools(MORE_TOOLS)
    outcome = replay_mutant(tmp_path / "mutant", more_goldens, MORE_SPEC, tools)
    rendered = outcome.reports["card_number"].render()
    assert "~ step 1 guard mask-cards → redact (tool_result) (left: 'sha256:" in rendered
    assert outcome.reports["card_number"].requests_explained == ("messages: from request 2",)


def test_a_golden_recorded_before_redactions_were_digested_compares_without_them(
    more_goldens: dict[str, Path], tmp_path: Path
) -> None:
    text = more_goldens["card_number"].read_text(encoding="utf-8")
    assert "    left: sha256:" in text
    old = tmp_path / "card_number.yaml"
    kept = [line for line in text.splitlines() if not line.startswith("    left: sha256:")]
    old.write_text("\n".join(kept) + "\n", encoding="utf-8")
    outcome = replay_mutant(tmp_path / "mutant", {"card_number": old}, MORE_SPEC, MORE_TOOLS)
    assert outcome.verdicts == {"card_number": "same"}
