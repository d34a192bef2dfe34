"""Redaction benchmark: our secret-shape catalogue against detect-secrets, on golden writes.

    .venv/bin/python benchmarks/redaction.py [--repeat 5]

DESIGN §6 asks to prefer a kept catalogue (detect-secrets' detectors) over a hand-grown list
if its cost on golden writes measures acceptable. This script measures, on the repository's
golden files (`recordings/`) and on the secret shapes the design names:

1. golden write: `dump_recording` of every file in `recordings/` (load not timed), with the
   redaction as shipped (keys, then the free-text catalogue on every string);
2. the same with the free-text scan turned off (keys only: the cost of the catalogue is the
   difference);
3. per string, over every string of those files: our `redact_text`, and `detect-secrets`'
   `scan_line` with its default plugins (if installed: `pip install detect-secrets`), which
   only reports secrets (replacing them would cost more);
4. which of the shapes each one finds (a row per shape).

Nothing here asserts: it is a report.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

SHAPES = {
    "Authorization: Bearer": "Authorization: Bearer abcdefghijklmnop1234",
    "sk- key": "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXyz1234567890",
    "sk-ant- key": "sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUVWXyz1234567890",
    "ghp_ token": "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    "AWS access key id": "AKIAIOSFODNN7EXAMPLE",
    "URL credentials": "postgresql://app:s3cr3tpass@db.internal:5432/shop",
    "password= pair": "password=hunter2correct",
    "JSON in text": 'config {"clientSecret": "abc123xyz789"}',
}


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from strings(v)


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from pytest_harness import redaction
    from pytest_harness.recording.golden import dump_recording
    from pytest_harness.recording.model import Recording

    files = sorted((ROOT / "recordings").rglob("*.yaml"))
    recordings = [Recording.load(f) for f in files]
    texts = [s for r in recordings for s in strings(r.to_dict())]

    def write_all() -> None:
        for recording in recordings:
            dump_recording(recording)

    write_all()  # warm-up: compile the patterns, load plugins
    shipped = best(write_all, args.repeat)
    scanners = redaction._scanners
    redaction._scanners = lambda: ()  # type: ignore[assignment]
    try:
        keys_only = best(write_all, args.repeat)
    finally:
        redaction._scanners = scanners
    ours = best(lambda: [redaction.redact_text(t) for t in texts], args.repeat)

    print(f"golden files: {len(files)}, strings in them: {len(texts)}")
    row = "{:<58} {:>9.2f} {}".format
    print(f"{'measure':<58} {'time':>12}")
    print(row("golden write, all files, redaction as shipped", shipped * 1e3, "ms"))
    print(row("golden write, all files, keys only (no free-text scan)", keys_only * 1e3, "ms"))
    per_file = (shipped - keys_only) / len(files)
    print(f"{'  the catalogue, per golden file':<58} {per_file * 1e3:>9.3f} ms")
    print(f"{'our catalogue, per string':<58} {ours / len(texts) * 1e6:>9.2f} us")

    found_ds: dict[str, bool] = {}
    noisy: dict[str, list[str | None]] = {}
    try:
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings
    except ImportError:
        print("detect-secrets: not installed (pip install detect-secrets), its rows skipped")
    else:
        with default_settings():
            list(scan_line("warm up"))
            theirs = best(lambda: [list(scan_line(t)) for t in texts], args.repeat)
            for shape, text in SHAPES.items():
                hits = list(scan_line(text))
                named = [s for s in hits if "High Entropy" not in s.type]
                noise = [s.secret_value for s in hits if "High Entropy" in s.type]
                found_ds[shape] = bool(named)
                noisy[shape] = noise
        per = theirs / len(texts) * 1e6
        print(row("detect-secrets scan_line (finds only), per string", per, "us"))
        print(f"{'  ratio detect-secrets / ours':<58} {theirs / ours:>11.1f}x")

    print()
    print("detect-secrets: 'found' by a named detector; its high-entropy plugins also flag")
    print("ordinary words (listed), which a redactor cannot replace without mangling text.")
    print(f"{'shape':<24} {'ours':<10} {'detect-secrets':<16} ours gives")
    for shape, text in SHAPES.items():
        got = redaction.redact_text(text)
        ds = "" if not found_ds else ("found" if found_ds[shape] else "MISSED")
        print(f"{shape:<24} {'redacted' if got != text else 'MISSED':<10} {ds:<16} {got}")
        if noisy.get(shape):
            print(f"{'':<24} {'':<10} entropy hits: {noisy[shape]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
