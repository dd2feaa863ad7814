#!/usr/bin/env python3
"""The measuring half of ``tools/gpu_check.sh`` (which builds llama.cpp and writes the models).

For each target (F16, Q4_0) it prints:

* the exactness probe's verdict (:mod:`skippy_tui.engine.native.invariance`) with the target's flash
  attention off and on, and what the default profile (``auto``) then does: exact chunks, or
  one verify batch, not bit-exact;
* plain tokens/s (``skippy-tui run --no-draft``) beside ``llama-bench`` built from the same
  sources at the same flash attention (``exact``/``auto`` load it off, ``fast`` on);
* speculative tokens/s for k = 4 and ``auto``, drafting by n-gram lookup and by the target
  itself (a self-pair: random weights accept nothing else), and with the ~100M draft
  (random: it accepts next to nothing, so ``auto`` should run at about plain's speed);
  one self-pair run under ``--profile exact`` shows what row-by-row verification costs
  where the probe certifies nothing;
* greedy identity: whether each speculative reply's tokens are the plain reply's.

Each run is a fresh ``skippy-tui run`` process, as a user starts it (the probe's verdict is
cached after the first load of each setting). Runs stop being started at ``--deadline``
(epoch seconds), so a device command ends inside its time limit with what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMPT = (
    "Rewrite the following text exactly, but replace the word 'lighthouse' with 'tower'. "
    "The old lighthouse stood on the cliff. Every night the lighthouse keeper climbed the stairs "
    "of the lighthouse and lit the lamp, and ships far out at sea saw the lighthouse and turned away."
)
TOKENS = {"gpu": 256, "cpu": 64}


@dataclass(frozen=True)
class Case:
    """One ``skippy-tui run``: its label and flags (the models are added per target)."""

    label: str
    flags: tuple[str, ...]
    draft: str = ""  # "", "self" (the target drafts for itself) or "small" (the ~100M draft)


CASES = (
    Case("plain (auto profile: flash attn off)", ("--no-draft",)),
    Case("plain (fast profile: flash attn auto)", ("--no-draft", "--profile", "fast")),
    Case("n-gram, k=4", ("--no-draft", "--draft-source", "ngram", "--n-draft", "4")),
    Case("n-gram, auto", ("--no-draft", "--draft-source", "ngram", "--n-draft", "auto")),
    Case("self-pair, k=4", ("--draft-source", "model", "--n-draft", "4"), "self"),
    Case("self-pair, auto", ("--draft-source", "model", "--n-draft", "auto"), "self"),
    Case("self-pair, k=4, profile exact", ("--draft-source", "model", "--n-draft", "4", "--profile", "exact"), "self"),
    Case("~100M draft, auto", ("--n-draft", "auto"), "small"),
)


class Clock:
    """Whether another step may start before the deadline (a step is skipped, and said so, after it)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def left(self) -> float:
        return self.deadline - time.time()

    def allows(self, what: str, needs: float) -> bool:
        if self.left() >= needs:
            return True
        print(f"   {what}: skipped, {max(self.left(), 0):.0f} s of the budget left")
        return False


def environment(work: Path) -> dict[str, str]:
    """The runs' environment: their own cache (probe verdicts) and no user config."""
    return {
        **os.environ,
        "SKIPPY_TUI_CACHE_DIR": str(work / "cache"),
        "XDG_CONFIG_HOME": str(work / "xdg"),
        "PYTHONIOENCODING": "utf-8",
    }


def skippy_run(args: list[str], work: Path, timeout: float) -> tuple[dict[str, Any] | None, dict[str, Any], str]:
    """``skippy-tui run --json``: (its finish event or None, its reply_started event, stderr)."""
    cmd = [sys.executable, "-m", "skippy_tui", "run", PROMPT, "--json", "--temperature", "0", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=environment(work), timeout=timeout)
    events = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    started = next((e for e in events if e.get("type") == "reply_started"), {})
    finish = next((e for e in events if e.get("type") == "finish"), None)
    if r.returncode != 0 or finish is None:
        return None, started, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    return finish, started, r.stderr


def llama_bench(binary: Path, model: Path, tokens: int, flash: bool, threads: int, timeout: float) -> float | None:
    """llama-bench's generation tokens/s (tg``tokens``, 3 repetitions, every layer offloaded)."""
    cmd = [str(binary), "-m", str(model), "-p", "0", "-n", str(tokens), "-ngl", "99", "-fa", "1" if flash else "0",
           "-t", str(threads), "-r", "3", "-o", "json"]  # fmt: skip
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return float(json.loads(r.stdout)[0]["avg_ts"])
    except (subprocess.TimeoutExpired, ValueError, KeyError, IndexError, json.JSONDecodeError):
        return None


def probe_verdicts(target: Path) -> list[str]:
    """The probe's verdict with flash attention off and on, and the auto profile's plan."""
    from skippy_tui.engine.native.invariance import cached_probe, probe_rows
    from skippy_tui.engine.native.model import Context, LoadParams, Model
    from skippy_tui.engine.policy.exactness import verify_plan, why_uncertified

    lines = []
    for flash in ("off", "on"):
        lp = LoadParams(n_ctx=1024, n_batch=512, n_ubatch=512, flash_attn=flash, n_gpu_layers=-1)
        t0 = time.perf_counter()
        with Model(target, lp) as model:
            ctx = Context(model, lp)
            try:
                inv = cached_probe(ctx, probe_rows(8), lp, None)  # fresh: no cache
            finally:
                ctx.close()
        plan = verify_plan("auto", True, inv)
        auto = plan.short() if plan is not None else "?"
        verdict = f"not probed: {why_uncertified(inv)}" if inv.note else inv.label()
        lines.append(f"   flash attn {flash:<3}: {verdict}  → auto: {auto}  ({time.perf_counter() - t0:.1f} s)")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("gpu", "cpu"), required=True)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--llama-bench", type=Path, required=True)
    p.add_argument("--deadline", type=float, required=True)
    args = p.parse_args(argv)
    clock = Clock(args.deadline)
    models = args.work / "models"
    draft = models / "draft-f16.gguf"
    tokens = TOKENS[args.mode]

    from skippy_tui.engine.native.devices import list_devices, system_info
    from skippy_tui.engine.native.model import default_threads

    threads = default_threads()
    print(f"== llama.cpp: {system_info()}")
    print("== devices: " + ", ".join(f"{d.name} ({d.description})" for d in list_devices()))
    for path in sorted(models.glob("*.gguf")):
        print(f"   {path.name}: {path.stat().st_size / 1e6:.0f} MB")
    for ftype in ("f16", "q4_0"):
        target = models / f"target-{ftype}.gguf"
        print(f"== target {ftype}: exactness probe (17 rows; a fresh probe, no cache)")
        if clock.allows("probe", 30):
            for line in probe_verdicts(target):
                print(line)
        print(f"== target {ftype}: greedy, {tokens} tokens, tok/s (identical: the same tokens as plain, auto profile)")
        plain_ids: list[int] | None = None
        for case in CASES:
            if not clock.allows(case.label, 25):
                continue
            extra = [] if not case.draft else ["--draft", str(target if case.draft == "self" else draft)]
            flags = ["--target", str(target), *extra, *case.flags, "--max-tokens", str(tokens)]
            finish, started, err = skippy_run(flags, args.work, max(clock.left(), 30))
            if finish is None:
                print(f"   {case.label:<36} failed: {err}")
                continue
            tps = finish["tokens_per_second"]
            line = f"   {case.label:<36} {tps:8.1f}"
            if case.label.startswith("plain (auto"):
                plain_ids = finish["token_ids"]
            if case.label.startswith("plain"):
                flash = "fast" in case.label
                if clock.allows("llama-bench", 20):
                    ref = llama_bench(args.llama_bench, target, tokens, flash, threads, max(clock.left(), 20))
                    fa = "on" if flash else "off"
                    line += f"   llama-bench tg{tokens} fa {fa}: " + (
                        f"{ref:.1f} (ours {tps / ref:.2f}×)" if ref else "failed"
                    )
            else:
                same = "?" if plain_ids is None else "yes" if finish["token_ids"] == plain_ids else "NO"
                acc = finish.get("acceptance_rate")
                verify = started.get("verify") or "-"
                line += f"   acceptance {acc:.0%}" if acc is not None and finish.get("n_drafted") else "   no drafts"
                line += f"   verify {verify}   identical {same}"
            print(line)
    print(f"== done, {clock.left():.0f} s of the budget left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
