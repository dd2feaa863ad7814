"""Entry points from the CLI: ``skippy-tui`` (the app) and ``skippy-tui replay FILE.json``."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import platformdirs

from ..cli_common import config_from_args
from ..config import APP, Config, ConfigError, config_path


def log_path() -> Path:
    """Where native stderr output goes while the app runs."""
    return Path(platformdirs.user_state_dir(APP)) / "skippy-tui.log"


@contextlib.contextmanager
def native_stderr_to_log() -> Iterator[Path | None]:
    """Send fd 2 to the log file for the app's lifetime, keeping the terminal for Textual.

    llama.cpp/ggml can write to fd 2 directly on rare paths (the engine routes
    their normal logs to a ring buffer); a stray line would corrupt the screen.
    Textual draws on ``sys.__stderr__``, so that is pointed at a duplicate of
    the original fd 2 first. Skipped when stderr is not a terminal.
    """
    if not (hasattr(os, "dup2") and sys.__stderr__ is not None and sys.__stderr__.isatty()):
        yield None
        return
    path = log_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        yield None
        return
    sys.__stderr__.flush()
    saved_fd = os.dup(2)
    term = os.fdopen(os.dup(2), "w", encoding=sys.__stderr__.encoding or "utf-8", errors="replace")
    original = sys.__stderr__
    sys.__stderr__ = term  # type: ignore[misc]
    os.dup2(log_fd, 2)
    os.close(log_fd)
    try:
        yield path
    finally:
        os.dup2(saved_fd, 2)
        os.close(saved_fd)
        sys.__stderr__ = original  # type: ignore[misc]
        with contextlib.suppress(OSError):
            term.close()


def _config(args: argparse.Namespace) -> tuple[Config, ConfigError | None]:
    try:
        return config_from_args(args, saved=True), None
    except ConfigError as e:
        # the defaults, but remember which file failed so the dialog names it
        given = getattr(args, "config", None)
        return Config(source=Path(given).expanduser() if given else config_path()), e


def _reload(args: argparse.Namespace) -> Config:
    """The config as at launch, read again (F5): the saved settings, the file, then the flags.
    Raises ConfigError."""
    return config_from_args(args, saved=True)


def early_engine(config: Config) -> Any:
    """The engine process started on ``config``'s models before the UI is imported and
    drawn (``engine.process.start_engine``), so the two overlap; None where the engine
    runs in-process, the config has a problem or the start fails (the app's load then
    starts one and reports what is wrong)."""
    if config.get("ui", "engine") != "process":
        return None
    try:
        spec = config.engine_spec()
        from ..engine.process.proxy import start_engine

        return start_engine(spec)
    except Exception:  # the load the app starts says what went wrong
        return None


def _run(make_app: Callable[[], Any]) -> int:
    # The engine thread re-takes the GIL after every llama.cpp call; with the
    # default 5 ms switch interval a rendering UI thread kept it waiting (1 ms: measurably faster).
    sys.setswitchinterval(0.001)
    with native_stderr_to_log():  # before an engine process starts: it inherits fd 2
        app = make_app()
        try:
            app.run()
        finally:
            if app.engine_started is not None:  # started early, never loaded from
                app.engine_started.discard()
    spec = app.speculator
    if spec is not None and app.owns_speculator and not app.generating:
        spec.close()
    return app.return_code or 0


def run_app(args: argparse.Namespace) -> int:
    """``skippy-tui``: open the app on the configured models (or the default pair).

    A bad config opens the app with an error dialog instead of exiting. An engine
    process starts on the models before the UI is imported (:func:`early_engine`).
    """
    config, error = _config(args)
    reload = functools.partial(_reload, args)
    yield_cpu = bool(config.get("ui", "yield_cpu"))

    def make_app() -> Any:
        started = early_engine(config) if error is None else None
        from .app import SkippyApp

        return SkippyApp(config, config_error=error, yield_cpu=yield_cpu, reload_config=reload, engine_started=started)

    return _run(make_app)


def run_replay(args: argparse.Namespace) -> int:
    """``skippy-tui replay FILE.json``: the saved conversation and its recorded steps, no models.

    With ``--continue`` the configured models load too, to continue the conversation.
    """
    from ..transcript import Transcript
    from .app import SkippyApp

    transcript = Transcript.load(args.file, repair_markdown=True)  # TranscriptError: one line, exit 1
    config, error = _config(args)
    want = bool(getattr(args, "continue_", False))
    return _run(
        lambda: SkippyApp(
            config,
            transcript=transcript,
            transcript_path=Path(args.file),
            load_models=want,
            config_error=error,
            reload_config=functools.partial(_reload, args),
        )
    )
