"""The mutation corpus, continued: the credit desk with more of the spec in play.

The desk of `test_mutation_corpus` grows what its spec there does not exercise: `redact`
guards on the input and on tool results (one a callable of the tools module), a `cel` guard,
two guards that block the same input, a rule reading a task label, a model retry, a second
fallback and an answer cut at its token limit (`on_truncation: continue`). Its runs are
recorded once; each mutation is replayed against them with the default fail-on set, and
must flag exactly the recordings whose runs it changes, as in the first corpus.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.replay.test_mutation_corpus import (
    DEFAULT_SCRIPT,
    RUNS,
    SPEC,
    TOOLS,
    App,
    Mutation,
    Outcome,
    edit,
    forget,
    make_app,
    record_runs,
    replay_mutant,
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

EVERYTHING = (
    "  - id: everything\n"
    "    on: input\n"
    "    check: contains\n"
    "    text: credit everything\n"
    "    message: Not everything.\n"
)
INJECTION = SPEC[SPEC.index("  - id: injection\n") : SPEC.index("\ntasks:")]

MORE_SPEC = SPEC
for old, new in [
    ("    retries: 0\n", "    retries: 1\n    on_truncation: continue\n"),
    ("    fallback: [backup]\n", "    fallback: [backup, backup2]\n"),
    (
        "  backup:\n",
        "  backup2:\n    use: scripted\n    script: scripts/backup.yaml\n  backup:\n",
    ),
    (
        "  - id: no-account-deletion\n",
        "  - id: desk-keeps-wontfix\n"
        '    when: tool == "close_ticket" && labels.team == "desk" && '
        'args.resolution == "wontfix"\n'
        "    then: deny\n"
        "  - id: no-account-deletion\n",
    ),
    (
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
        "  - id: urgent\n"
        "    on: input\n"
        "    check: cel\n"
        '    when: text.startsWith("Urgent")\n'
        "    action: warn\n" + EVERYTHING + "  - id: injection\n",
    ),
    ("    budget: {steps", "    labels: {team: desk}\n    budget: {steps"),
]:
    MORE_SPEC = edit(old, new)(MORE_SPEC)

MORE_SCRIPT = edit(  # the fallback run: its retry fails too
    '  - input: "Fallback*"\n    turns:\n      - {error: server}\n',
    '  - input: "Fallback*"\n    turns:\n      - {error: server}\n      - {error: server}\n',
)(DEFAULT_SCRIPT) + (
    """\
  - input: "Whisper*"
    turns:
      - {say: "Kept."}
  - input: "Retry*"
    turns:
      - {error: server}
      - {say: "Answered after a retry."}
  - input: "Long*"
    turns:
      - {say: "Part one", incomplete: max_tokens}
      - {say: " and part two."}
  - input: "Urgent*"
    turns:
      - {say: "On it."}
  - input: "Shut*"
    turns:
      - {call: close_ticket, args: {ticket_id: T-2, resolution: wontfix}}
      - {say: "T-2 stays open."}
"""
)

MORE_RUNS = {
    **RUNS,
    "hush": "Whisper: HUSH is the word.",
    "retry": "Retry, please.",
    "long": "Long answer, please.",
    "urgent": "Urgent: the desk is on fire.",
    "wontfix": "Shut T-2 as wontfix.",
}


def make_more_app(root: Path, spec: str = MORE_SPEC, tools: str = MORE_TOOLS) -> App:
    app = make_app(root, spec, tools)
    (app.root / "scripts" / "default.yaml").write_text(MORE_SCRIPT, encoding="utf-8")
    return app


@pytest.fixture(scope="module")
def more_goldens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("desk-more")
    app = make_more_app(root / "app")
    try:
        paths = asyncio.run(record_runs(app, root / "recordings", MORE_RUNS))
    finally:
        forget(app)
    yield paths


def replay_more(root: Path, goldens: dict[str, Path], spec: str, tools: str) -> Outcome:
    """`replay_mutant` on this desk (its tools, scripts and runs)."""
    return replay_mutant(root, goldens, spec, tools, make=make_more_app)


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
    Mutation(
        "retries lowered (default 1 → 0) under a recorded retry",
        spec=edit("    retries: 1\n", "    retries: 0\n"),
        flags=frozenset({"retry", "fallback"}),
    ),
    Mutation(
        "fallback order swapped (backup2 first)",
        spec=edit("fallback: [backup, backup2]", "fallback: [backup2, backup]"),
        flags=frozenset({"fallback"}),
    ),
    Mutation(
        "on_truncation continue → accept",
        spec=edit("on_truncation: continue", "on_truncation: accept"),
        flags=frozenset({"long"}),
    ),
    Mutation(
        "on_truncation continue → fail",
        spec=edit("on_truncation: continue", "on_truncation: fail"),
        flags=frozenset({"long"}),
    ),
    Mutation(
        "a cel guard's when changed (urgent)",
        spec=edit('text.startsWith("Urgent")', 'text.startsWith("URGENT")'),
        flags=frozenset({"urgent"}),
    ),
    Mutation(
        "two blocking guards swapped (injection before everything)",
        spec=lambda text: edit(INJECTION, INJECTION + EVERYTHING)(edit(EVERYTHING, "")(text)),
        flags=frozenset({"injection"}),
    ),
    Mutation(
        "a task label a rule reads changed (team desk → ops)",
        spec=edit("labels: {team: desk}", "labels: {team: ops}"),
        flags=frozenset({"wontfix"}),
    ),
]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_every_behaviour_change_is_flagged_and_nothing_else(
    mutation: Mutation, more_goldens: dict[str, Path], tmp_path: Path
) -> None:
    outcome = replay_more(
        tmp_path / "mutant", more_goldens, mutation.spec(MORE_SPEC), mutation.tools(MORE_TOOLS)
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
    outcome = replay_more(tmp_path / "mutant", more_goldens, MORE_SPEC, tools)
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
    outcome = replay_more(tmp_path / "mutant", {"card_number": old}, MORE_SPEC, MORE_TOOLS)
    assert outcome.verdicts == {"card_number": "same"}
