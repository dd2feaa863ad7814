#!/usr/bin/env python3
"""The app's tokens/s beside headless ``skippy-tui run``, same prompt, pair, k and length.

Drives the real app in a tmux pane (a real terminal, real rendering), reads the
reply's figures from the transcript the app autosaves, and runs ``skippy-tui run
--json`` on the same settings; app and headless alternate, ``--repeats`` times.
Prints each run's tokens/s (the engine's own figure: committed tokens over the
steps' time, prefill excluded), the wall-clock time from Enter to the saved
reply, the medians and app/headless. A last headless run closes the series, so
each app run also gets a ratio to the mean of the headless runs either side of
it (the median of those drifts less when the machine changes speed mid-series).

    python tools/app_speed.py                      # 512 tokens, k=4, greedy, 3 repeats, 150x42
    python tools/app_speed.py --n-draft auto --temperature 0.8 --seed 1
    python tools/app_speed.py -- --target T.gguf --draft D.gguf   # any model flags after --
    python tools/app_speed.py --replay             # the UI's own cost, no decoding (below)
    python tools/app_speed.py --app-env OMP_WAIT_POLICY=active   # a setting for the app alone
    python tools/app_speed.py --yield-cpu --threads 1   # the UI at nice 19; one llama.cpp thread a model

Each run also prints the CPU time of the app's UI thread from Enter to the saved
reply. With ``--replay`` nothing decodes in the app: one reply is recorded
headless (``run --json``), and the app, its engine in-process, streams those
events at their recorded step times. The UI thread's CPU per reply is then what
the UI asks for when nothing competes with it; beside a decoding engine on a
small machine it may get less (at nice 19 with ``--yield-cpu``, much less), so compare the two.

Needs tmux and ``skippy-tui`` on PATH (the project's venv). Speed is noisy on a
shared machine: quote medians, and run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

PROMPT = "Write a detailed essay about the history of the printing press."


def _config(tmp: Path, args: argparse.Namespace) -> Path:
    seed = f"{args.seed}" if args.seed is not None else '"random"'
    n_draft = f'"{args.n_draft}"' if args.n_draft == "auto" else args.n_draft
    threads = f"[target]\nthreads = {args.threads}\nthreads_batch = {args.threads}\n" if args.threads else ""
    text = f"""{threads}
[speculation]
n_draft = {n_draft}
[sampling]
temperature = {args.temperature}
seed = {seed}
[generation]
max_tokens = {args.max_tokens}
[ui]
autosave = true
transcript_dir = "{tmp / "transcripts"}"
yield_cpu = {"true" if args.yield_cpu else "false"}
"""
    path = tmp / "config.toml"
    path.write_text(text)
    return path


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    # a private state dir (prompt history, theme), the user's model cache kept
    env["XDG_STATE_HOME"] = str(tmp / "state")
    env["XDG_DATA_HOME"] = str(tmp / "data")
    return env


def headless(exe: str, config: Path, extra: list[str], env: dict[str, str], prompt: str) -> tuple[float, float]:
    """(tokens/s, wall s) of one ``skippy-tui run --json``."""
    cmd = [exe, "--config", str(config), *extra, "run", prompt, "--json"]
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    wall = time.perf_counter() - t
    fin = json.loads(out.strip().splitlines()[-1])
    return fin["tokens_per_second"], wall


def _app_pid(config: Path) -> int | None:
    """The app's process: the Python process running with ``config`` (not tmux, a shell or an engine child)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = b" ".join(argv).decode(errors="replace")
        if str(config) in text and b"python" in argv[0] and "multiprocessing" not in text:
            found.append(int(pid))
    return min(found) if found else None


def _thread_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of process ``pid``'s main thread; 0 where unknown."""
    if pid is None:
        return 0.0
    try:
        stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=False).stdout


def in_app(
    exe: str | list[str],
    config: Path,
    extra: list[str],
    env: dict[str, str],
    prompt: str,
    size: tuple[int, int],
    tmp: Path,
    app_env: Sequence[str] = (),
) -> tuple[float, float, float, float]:
    """(tokens/s, wall s from Enter to the saved reply, launch-to-ready s, UI thread CPU s
    over that wall time) of one reply in the app (``exe``: the command that starts it;
    ``app_env``: ``NAME=VALUE`` settings for the app alone)."""
    tdir = tmp / "transcripts"
    shutil.rmtree(tdir, ignore_errors=True)
    session = f"skippy-speed-{os.getpid()}"
    cmd = " ".join(shlex.quote(c) for c in [*([exe] if isinstance(exe, str) else exe), "--config", str(config), *extra])
    envs = [f"{k}={shlex.quote(env[k])}" for k in ("XDG_STATE_HOME", "XDG_DATA_HOME")]
    envs += [shlex.quote(e) for e in app_env]
    t_launch = time.perf_counter()
    shell = f"env {' '.join(envs)} {cmd}"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]), shell], check=True
    )
    try:
        deadline = time.monotonic() + 300
        while "ctx 0/" not in _tmux("capture-pane", "-p", "-t", session):  # the status bar once loaded
            if time.monotonic() > deadline:
                raise RuntimeError("the app did not load within 300 s:\n" + _tmux("capture-pane", "-p", "-t", session))
            time.sleep(0.05)
        ready = time.perf_counter() - t_launch
        _tmux("send-keys", "-t", session, "-l", prompt)
        time.sleep(0.3)
        pid = _app_pid(config)
        cpu = _thread_cpu(pid)
        t = time.perf_counter()
        _tmux("send-keys", "-t", session, "Enter")
        deadline = time.monotonic() + 600
        while True:
            files = sorted(tdir.glob("*.json")) if tdir.exists() else []
            if files:
                try:
                    data = json.loads(files[-1].read_text())
                    break
                except (json.JSONDecodeError, OSError):
                    pass  # saves are atomic, but be lenient
            if time.monotonic() > deadline:
                raise RuntimeError("no reply saved within 600 s:\n" + _tmux("capture-pane", "-p", "-t", session))
            time.sleep(0.05)
        wall = time.perf_counter() - t
        cpu = _thread_cpu(pid) - cpu
        fin = _last_finish(data)
        return fin["tokens_per_second"], wall, ready, cpu
    finally:
        _tmux("send-keys", "-t", session, "C-q")
        time.sleep(0.5)
        _tmux("kill-session", "-t", session)


def _last_finish(data: dict) -> dict:
    for entry in reversed(data.get("messages", [])):
        for ev in reversed(entry.get("events", [])):
            if ev.get("type") == "finish":
                return ev
    raise RuntimeError("the saved transcript holds no finished reply")


def record(exe: str, config: Path, extra: list[str], env: dict[str, str], prompt: str, path: Path) -> None:
    """One headless reply's events (``run --json``) into ``path``, for ``--replay``."""
    cmd = [exe, "--config", str(config), *extra, "run", prompt, "--json"]
    path.write_text(subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout)


def serve_replay(events: Path, argv: list[str]) -> int:
    """Start the app (``argv``: its command-line flags) with an engine that decodes nothing:
    each reply streams the recorded ``events``, every step after its recorded step time."""
    from skippy_tui import cli
    from skippy_tui.engine import speculator
    from skippy_tui.engine.events import StepVerified, event_from_dict

    recorded = [event_from_dict(json.loads(line)) for line in events.read_text().splitlines() if line.strip()]

    def run(self: object, messages: object, settings: object, cancel: object = None) -> Iterator[object]:
        for ev in recorded:
            if isinstance(ev, StepVerified):
                time.sleep((ev.sync_ms + ev.draft_ms + ev.verify_ms) / 1000)
            yield ev

    speculator.Speculator.run = run  # type: ignore[method-assign]
    return cli.main(argv)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-draft", default="4", help='k, or "auto" (default 4)')
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--size", default="150x42", help="terminal size COLSxROWS")
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--threads", type=int, default=0, help="llama.cpp threads per model (default: the config's)")
    p.add_argument(
        "--yield-cpu", action="store_true", help="the app's [ui] yield_cpu = true (its UI at nice 19; default: false)"
    )
    # the default since issue 57.12 (the UI at the normal priority); kept for old command lines
    p.add_argument("--equal-priority", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--app-env", action="append", default=[], metavar="NAME=VALUE", help="an environment setting for the app alone"
    )
    p.add_argument("--replay", action="store_true", help="the app decodes nothing: it streams a recorded reply")
    p.add_argument("--serve-replay", type=Path, help=argparse.SUPPRESS)  # the app's side of --replay
    p.add_argument("model_flags", nargs="*", help="flags passed to both (after --), e.g. --target T.gguf")
    args = p.parse_args(argv)
    if args.serve_replay:
        return serve_replay(args.serve_replay, args.model_flags)
    exe = shutil.which("skippy-tui")
    if exe is None or shutil.which("tmux") is None:
        print("needs skippy-tui (the project's venv) and tmux on PATH", file=sys.stderr)
        return 2
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    with tempfile.TemporaryDirectory(prefix="skippy-speed-") as d:
        tmp = Path(d)
        config, env = _config(tmp, args), _env(tmp)
        if args.replay:
            return _replay(exe, config, env, args, (cols, rows), tmp)
        app_tps, head_tps, ready, ui_cpu = [], [], [], []
        head = f"{'run':>4} {'headless tok/s':>15} {'app tok/s':>10} {'ratio':>6} {'app wall s':>10} {'ready s':>8}"
        print(head + f" {'UI cpu s':>8}")
        for i in range(args.repeats):
            h, _ = headless(exe, config, args.model_flags, env, args.prompt)
            a, aw, r, c = in_app(exe, config, args.model_flags, env, args.prompt, (cols, rows), tmp, args.app_env)
            head_tps.append(h)
            app_tps.append(a)
            ready.append(r)
            ui_cpu.append(c)
            print(f"{i + 1:>4} {h:>15.1f} {a:>10.1f} {a / h:>6.2f} {aw:>10.1f} {r:>8.2f} {c:>8.2f}", flush=True)
        # one more headless run, so that every app run sits between two (the machine drifts)
        h, _ = headless(exe, config, args.model_flags, env, args.prompt)
        head_tps.append(h)
        print(f"{'':>4} {h:>15.1f}", flush=True)
        bracketed = [a / ((head_tps[i] + head_tps[i + 1]) / 2) for i, a in enumerate(app_tps)]
        mh, ma = statistics.median(head_tps), statistics.median(app_tps)
        print(
            f"median: headless {mh:.1f} tok/s, app {ma:.1f} tok/s, app/headless {ma / mh:.3f} "
            f"(k={args.n_draft}, {args.max_tokens} tokens, T={args.temperature}, {cols}x{rows}, "
            f"yield_cpu {args.yield_cpu}, "
            f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}); launch to ready {statistics.median(ready):.2f} s; "
            f"UI thread {statistics.median(ui_cpu):.2f} s of CPU per reply"
        )
        print(
            f"each app run over the headless runs either side of it: median {statistics.median(bracketed):.3f} "
            f"(min {min(bracketed):.3f}, max {max(bracketed):.3f})"
        )
    return 0


def _replay(
    exe: str, config: Path, env: dict[str, str], args: argparse.Namespace, size: tuple[int, int], tmp: Path
) -> int:
    events = tmp / "reply.jsonl"
    record(exe, config, args.model_flags, env, args.prompt, events)
    with config.open("a") as f:
        f.write('engine = "thread"\n')  # in-process, where the replaying engine is patched in
    app = [sys.executable, str(Path(__file__).resolve()), "--serve-replay", str(events), "--"]
    cpus, walls = [], []
    print(f"{'run':>4} {'reply wall s':>12} {'UI cpu s':>8} {'UI share':>8}")
    for i in range(args.repeats):
        _, wall, _, cpu = in_app(app, config, args.model_flags, env, args.prompt, size, tmp)
        cpus.append(cpu)
        walls.append(wall)
        print(f"{i + 1:>4} {wall:>12.2f} {cpu:>8.2f} {cpu / wall:>8.2f}", flush=True)
    print(
        f"median: UI thread {statistics.median(cpus):.2f} s of CPU per reply streamed over "
        f"{statistics.median(walls):.2f} s, nothing decoding ({args.max_tokens} tokens, k={args.n_draft}, "
        f"{size[0]}x{size[1]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
