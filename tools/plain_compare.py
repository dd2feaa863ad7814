#!/usr/bin/env python3
"""Plain decoding beside llama.cpp's ``llama-bench``, interleaved round by round.

``../shared/tools/native-compare.sh`` runs each side once (llama-bench's three
repetitions back to back), so on a VM whose speed flips by 10-30 % from one run
to the next a single ratio says more about the machine than about the loop.
Here every round runs ``llama-bench tgN`` (one repetition) and ``skippy-tui run
--no-draft --stats`` on the same F32 file, threads and length, alternating which
goes first, and the figures are the medians over the rounds, the ratio of those
medians and the median of each round's own ratio.

Flash attention is matched to our profile: ``exact`` (the default) runs with it
off, so llama-bench gets ``-fa off`` (its own default is ``auto``, i.e. on for a
CPU); ``--profile fast`` gets ``-fa on``. Both decode at the same positions:
our reply's first step follows the prompt's prefill, so llama-bench gets that
many tokens of depth (``-d``, prefilled outside its timing; ``--depth 0`` for
its plain ``tgN``). llama-bench's context holds only those tokens; ``run`` sizes
its own to the prompt plus ``--max-tokens``, padded to 256 cells (``--n-ctx`` caps it).

    python tools/plain_compare.py                       # 10 rounds, 200 tokens
    python tools/plain_compare.py --rounds 15 --profile fast
    python tools/plain_compare.py --llama-bench PATH    # another llama-bench build
    python tools/plain_compare.py --depth 0             # llama-bench's plain tgN
    python tools/plain_compare.py --bench-hugepages     # llama-bench's weights in huge pages too

Our weights are in transparent huge pages where the kernel offers them (``hugepages =
"auto"``, README "Huge pages"); llama-bench maps the file into 4 KiB pages, its default.
``--bench-hugepages`` gives llama-bench huge pages as well (it reads the file into memory,
``-lm none``, and glibc advises its large allocations huge, ``GLIBC_TUNABLES=
glibc.malloc.hugetlb=1``), so that the two differ only by the loop around the decode.

llama-bench comes from ``../shared/tools/native-compare.sh``, which builds it from
the installed llama-cpp-python's own sources (``~/.cache/skippy-native``). Run
nothing else meanwhile and quote the medians.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

PROMPT = "Write a detailed story about a lighthouse keeper who finds a message in a bottle."
TOKS_RE = re.compile(r"([0-9.]+) tok/s")


def find_llama_bench(given: str | None) -> Path:
    """The llama-bench binary: ``given``, else the newest one native-compare.sh built."""
    if given:
        if not os.access(given, os.X_OK):
            sys.exit(f"{given}: no such executable")
        return Path(given)
    found = sorted(glob.glob(os.path.expanduser("~/.cache/skippy-native/*/build/bin/llama-bench")))
    if not found:
        sys.exit("no llama-bench found: build it once with ../shared/tools/native-compare.sh, or pass --llama-bench")
    return Path(found[-1])


def target_file() -> Path:
    """The embedded default target's F32 file (derived on first use, as the app does)."""
    from skippy_tui.config import cache_dir
    from skippy_tui.engine.errors import SkippyError
    from skippy_tui.engine.load.defaults import default_pair

    try:
        return default_pair(cache_dir() / "models")[0]
    except SkippyError as e:
        sys.exit(f"the default target is not available: {e}")


def prompt_depth(args: argparse.Namespace) -> int:
    """Tokens our reply's prefill decodes before its first step (the prompt but its last
    token, which the first step decodes): the depth llama-bench's tgN starts at."""
    cmd = ["skippy-tui", "run", PROMPT, "--max-tokens", "1", "--no-draft", "--json", "--profile", args.profile]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        started = json.loads(out.stdout.splitlines()[0])
        return int(started["target_sync"]["end"]) - int(started["target_sync"]["start"])
    except (ValueError, LookupError, TypeError):
        sys.exit(f"skippy-tui run failed (exit {out.returncode}): {out.stderr.strip()[-400:] or 'no output'}")


def bench_once(binary: Path, model: Path, args: argparse.Namespace) -> float:
    """llama-bench tgN at ``args.depth``, one repetition: tokens/s."""
    fa = "on" if args.profile == "fast" else "off"
    cmd = [str(binary), "-m", str(model), "-p", "0", "-n", str(args.tokens), "-t", str(args.threads)]
    cmd += ["-d", str(args.depth), "-r", "1", "-fa", fa, "-o", "json"]
    env = None
    if args.bench_hugepages:
        cmd += ["-lm", "none"]
        env = {**os.environ, "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    try:
        return float(json.loads(out.stdout)[0]["avg_ts"])
    except (ValueError, LookupError, TypeError):
        sys.exit(f"llama-bench failed (exit {out.returncode}): {out.stderr.strip()[-400:] or 'no output'}")


def ours_once(args: argparse.Namespace) -> float:
    """``skippy-tui run --no-draft --stats``: the engine's tokens/s (prefill excluded)."""
    cmd = ["skippy-tui", "run", PROMPT, "--temperature", "0", "--max-tokens", str(args.tokens), "--no-draft"]
    cmd += ["--profile", args.profile, "--stats"]
    if args.n_ctx:
        cmd += ["--n-ctx", str(args.n_ctx)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = TOKS_RE.findall(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "")
    if out.returncode != 0 or not found:
        sys.exit(f"skippy-tui run failed (exit {out.returncode}): {out.stderr.strip()[-400:]}")
    return float(found[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10, help="rounds of both (default 10)")
    ap.add_argument("--tokens", type=int, default=200, help="tokens decoded per run (default 200)")
    ap.add_argument("--threads", type=int, default=min(os.cpu_count() or 1, 4), help="threads (default min(CPUs, 4))")
    ap.add_argument("--profile", choices=("exact", "fast"), default="exact", help="our profile; FA follows it")
    ap.add_argument("--n-ctx", type=int, default=0, help="our largest context window (default: the configured one)")
    ap.add_argument("--llama-bench", help="the llama-bench binary (default: native-compare.sh's build)")
    ap.add_argument("--depth", type=int, help="llama-bench's depth in tokens (default: our prompt's prefill)")
    ap.add_argument(
        "--bench-hugepages", action="store_true", help="llama-bench reads its weights into huge pages (as ours)"
    )
    args = ap.parse_args()
    if shutil.which("skippy-tui") is None:
        sys.exit("skippy-tui is not on PATH: activate the project's virtual environment first")
    binary, model = find_llama_bench(args.llama_bench), target_file()
    if args.depth is None:
        args.depth = prompt_depth(args)
    load = os.getloadavg()[0]
    print(
        f"{model.name}, {args.tokens} tokens at depth {args.depth}, {args.threads} threads, "
        f"profile {args.profile}, llama-bench weights {'huge pages' if args.bench_hugepages else 'mapped'}, "
        f"load {load:.2f}"
    )
    bench, ours = [], []
    for r in range(args.rounds):
        if r % 2 == 0:
            bench.append(bench_once(binary, model, args))
            ours.append(ours_once(args))
        else:
            ours.append(ours_once(args))
            bench.append(bench_once(binary, model, args))
        b, o = bench[-1], ours[-1]
        print(f"round {r + 1:2d}: llama-bench {b:6.1f}  ours {o:6.1f}  ratio {o / b:.3f}", flush=True)
    mb, mo = statistics.median(bench), statistics.median(ours)
    paired = statistics.median(o / b for o, b in zip(ours, bench, strict=True))
    print(f"medians: llama-bench {mb:.1f}  ours {mo:.1f} tok/s  ratio {mo / mb:.3f}  median of ratios {paired:.3f}")
    print(f"load {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
