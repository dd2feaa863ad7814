#!/usr/bin/env python3
"""Make ``docs/screenshot.svg``: the real app, one short reply, the panel showing its steps.

Runs the app headless with Textual's Pilot (``app.run_test``) on the embedded
default pair (SmolLM2-135M-Instruct F32 target, its Q4_1 as the draft) and the
default settings, sends one message, waits until the reply has finished, and
saves Textual's own SVG screenshot of the screen.

    python tools/screenshot.py                        # docs/screenshot.svg, 140x40
    python tools/screenshot.py --out /tmp/shot.svg --size 160x48 --threads 1

The user config, data and state dirs point at a temporary folder, so a
developer's own config, theme and history stay out of the picture; the cache
dir (the derived F32 target) is the usual one, or ``SKIPPY_TUI_CACHE_DIR``.
The tokens/s in the status bar are the machine's own: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Write a haiku about the sea."


async def _wait(pilot, cond, timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"screenshot: timed out after {timeout:.0f}s waiting for {what}")
        await pilot.pause(0.1)


async def shoot(out: Path, size: tuple[int, int], prompt: str, max_tokens: int, threads: int) -> None:
    from skippy_tui.config import Config
    from skippy_tui.ui.app import SkippyApp

    cfg = Config()  # the defaults: the embedded pair, speculation "auto", greedy
    cfg.set("generation", "max_tokens", max_tokens)
    if threads:
        cfg.set("target", "threads", threads)
        cfg.set("target", "threads_batch", threads)
    app = SkippyApp(cfg)
    async with app.run_test(size=size) as pilot:
        await _wait(pilot, lambda: app.speculator is not None and not app.loading, 600, "the models to load")
        app.prompt.load_text(prompt)
        await pilot.press("enter")
        await _wait(pilot, lambda: app.generating, 30, "the reply to start")
        await _wait(pilot, lambda: not app.generating and len(app.transcript.entries) == 2, 900, "the reply")
        await pilot.pause(1.0)  # the panel and status bar catch up (they refresh a few times a second)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(app.export_screenshot(title="skippy-tui"), encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshot.svg")
    ap.add_argument("--size", default="140x40", help="COLUMNSxROWS (default 140x40)")
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="target threads (0 = the config's default)")
    args = ap.parse_args()
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    with tempfile.TemporaryDirectory(prefix="skippy-shot-") as home:
        for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
            os.environ[var] = str(Path(home) / var.lower())
        asyncio.run(shoot(args.out, (cols, rows), args.prompt, args.max_tokens, args.threads))
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
