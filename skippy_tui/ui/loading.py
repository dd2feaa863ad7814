"""Loading the models: F5 (after re-reading the config), and the picker's switch (F8).

Both load in a thread worker through :func:`load_speculator`, which reports its
stages as messages (``LoadProgress``, ``SwitchProgress``) and checks a cancel flag
that quitting sets. A switch keeps the old pair answering until the new one is
ready; a pair loaded during a reply takes over when that reply ends.
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual import work
from textual.widgets import Label, ProgressBar
from textual.worker import Worker, WorkerState

from ..config import ConfigError, config_path
from ..engine.errors import SkippyError
from ..engine.load.loader import EngineSpec, live_changes
from ..engine.policy.exactness import NOT_BIT_EXACT, plan_of
from ..saved import overridden, save_defaults
from .messages import LoadProgress
from .priority import lower_threads, terminal_path
from .screens.error import ErrorScreen, how_to_fix
from .screens.model_picker import ModelChoice, SwitchFailedScreen, SwitchProgress, picker_for


@dataclass(frozen=True)
class ConfigReload:
    """F5's new load of the pair the re-read config names (the config already says it, so
    :meth:`apply` changes nothing); ``keep``: the session's speculation settings (F3) that
    carry over to the new pair, those the file did not change."""

    label: str
    keep: tuple[str, ...] = ()

    def apply(self, cfg: Any) -> None:
        pass


class LoadingMixin:
    """Loading and switching models for the app, and the error dialog a failed load shows.

    Owns ``loading`` (F5's load is running), ``load_stage`` (what it is doing),
    ``_load_cancel`` (quit sets it), ``switching`` (the picker's choice while it loads) and
    ``_switched`` (that pair loaded, waiting for the reply in flight to end). Relies on the
    app's ``config``, ``_reload_config``, ``_config_read``, ``_sampling_read``, ``speculator``,
    ``owns_speculator``, ``sampling``, ``generation``, ``transcript``, ``generating``
    (GenerationMixin), ``_n_past`` / ``_n_ctx``, ``_update_status`` (StatusMixin),
    ``_snapshot_metadata`` and ``_unless_kept`` (FilesMixin)
    and ``_quit_now`` / ``_relay`` (the app).
    """

    def _init_loading(self) -> None:
        self.loading = False
        self.load_stage = ""  # the stage the load last reported, for the status bar
        self._load_cancel = threading.Event()  # quit during a load stops it (else exit waits for it)
        self.switching: ModelChoice | None = None  # the pair the picker chose, while it loads
        self._switched: Any = None  # that pair loaded, waiting for the reply in flight to end

    def action_load_models(self) -> None:
        if self.speculator is not None or self.loading:
            return
        if not self._reread_config():
            return
        try:
            spec = self.config.engine_spec()
        except ConfigError as e:
            self._show_error("The config has a problem", e)
            return
        self.loading = True
        self.load_stage = ""
        self.query_one("#loading").display = True
        self.query_one("#loading-label", Label).update("checking models…")
        self.refresh_bindings()
        self._load_cancel = threading.Event()
        self._load(spec, self._load_cancel)

    def action_reload_config(self) -> None:
        """F5 with models loaded: read the config again. Its sampling and generation keys
        apply from the next reply; speculation keys the loaded pair can take (n_draft, p_min,
        source, …) from the next step; a change to what is loaded (a path, a load key, the
        profile) loads the pair again as F8 switches: the current one answers meanwhile and
        the conversation stays. The session's F3/F4 settings stay unless the file changed them."""
        if self.speculator is None or self.loading or self.switching is not None:
            return
        try:
            before: EngineSpec | None = self.config.engine_spec()
        except ConfigError:
            before = None
        values = copy.deepcopy(self.config.values)
        if not self._reread_config():
            return
        after = self.config.engine_spec()  # checked by _reread_config
        where = self.config.source.name if self.config.source else "the defaults"
        plan = live_changes(before, after)
        if plan is None:
            # F3's k and p_min carry over to the new pair unless the file changed them
            keep = tuple(
                k
                for k in ("n_draft", "p_min")
                if before and getattr(before.speculation, k) == getattr(after.speculation, k)
            )
            self._start_switch(ConfigReload(f"the models in {where}", keep), after)
            return
        if plan:
            try:
                self.speculator.update(**plan)
            except SkippyError as e:
                self._show_error("The config's speculation settings do not fit the loaded models", e)
                return
            self._update_status()
            said = ", ".join(f"{k} = {v}" for k, v in plan.items())
            self.notify(f"{said} from the next step (the models stay loaded).", title=f"{where} re-read", timeout=5)
        elif self.config.values == values:
            self.notify(f"{where} has no changes: the models stay loaded.", timeout=4)

    def _reread_config(self) -> bool:
        """Read the config again before loading; what F3/F4 changed in this session stays on top.

        Returns False (with the error dialog up) when it is still wrong.
        """
        if self._reload_config is None:
            return True
        try:
            fresh = self._reload_config()
            gen = fresh.generation()
            fresh.engine_spec()  # bounds, before anything is replaced
        except ConfigError as e:
            self._show_error("The config still has a problem", e)
            return False
        for section, values in self.config.values.items():
            for key, value in values.items():
                if value != self._config_read[section][key]:  # changed in this session (F3 with no models, F4)
                    fresh.values[section][key] = value
        changed = fresh.values != self.config.values
        self.config, self._config_read, self._config_error = fresh, copy.deepcopy(fresh.values), None
        self.generation = gen
        if self.sampling == self._sampling_read:  # not tuned in this session: the file's sampling
            self.sampling = gen.sampling
        self._sampling_read = gen.sampling
        if changed:
            self.notify(f"Settings re-read from {fresh.source or 'the defaults'}.", timeout=4)
        return True

    def _loader(self) -> Callable[..., Any]:
        """``load_speculator``, or ``load_in_process`` with ``[ui] engine = "process"``: the
        engine in a child process shares no GIL with rendering (engine/process/proxy.py)."""
        if self.config.get("ui", "engine") == "process":
            from ..engine.process.proxy import load_in_process

            # the launcher's early start, taken over once (a different spec discards it)
            started, self.engine_started = self.engine_started, None
            return functools.partial(load_in_process, started=started) if started is not None else load_in_process
        from ..engine.load.loader import load_speculator

        return load_speculator

    @work(thread=True, exclusive=True, exit_on_error=False, group="load", name="load")
    def _load(self, spec: Any, cancel: threading.Event) -> Any:
        # a worker thread at the engine's priority (ui/priority.py): a child process inherits it
        load = self._loader()
        return load(spec, lambda stage, f: self.post_message(LoadProgress(stage, f)), cancel.is_set)

    def on_load_progress(self, msg: LoadProgress) -> None:
        if not self.loading:
            return
        if msg.stage != self.load_stage:  # the status bar says it too, with why (the probe takes long)
            self.load_stage = msg.stage
            self._update_status()
        self.query_one("#loading-label", Label).update(msg.stage)
        self.query_one("#loading-bar", ProgressBar).update(progress=round(msg.fraction * 100))

    def _verification_notice(self, speculator: Any) -> None:
        """Say once per load when replies cannot be plain decoding's bit for bit (``auto`` on a
        build that certifies no verify batch), or stay so only row by row (``exact``)."""
        speculation = getattr(speculator, "speculation", None)
        if getattr(speculator, "drafter", None) is None or speculation is None or not speculation.enabled:
            return
        plan, inv = plan_of(speculator), getattr(speculator, "invariance", None)
        if plan is not None and plan.checked and not plan.exact:
            text = (
                f"{NOT_BIT_EXACT[0].upper()}{NOT_BIT_EXACT[1:]} ({plan.why}). Verification is one batch, so "
                'speculation can pay; profile = "exact" keeps replies identical, verifying row by row.'
            )
            self.notify(text, title="Not bit-exact", severity="warning", timeout=15)
        elif inv is not None and inv.note:
            self.notify(inv.note, title="Verification is row by row", severity="warning", timeout=15)

    def _loaded(self, speculator: Any) -> None:
        self.speculator = speculator
        self._verification_notice(speculator)
        if self._relay is not None:  # an engine process's pipe reader yields the CPU as the UI does
            lower_threads(getattr(speculator, "relay_threads", ()))
        watch = getattr(speculator, "watch_terminal", None)
        if watch is not None and not self.is_headless:  # keys not yet read pause its steps (any priority)
            watch(terminal_path())
        self.loading = False
        self.replay = False
        self.query_one("#loading").display = False
        self._n_ctx = speculator.n_ctx
        self._n_past = speculator.n_past
        self._update_status()
        self.refresh_bindings()
        if getattr(speculator, "no_rollback", ""):
            self.notify(
                speculator.no_rollback.capitalize() + ".", title="Plain decoding", severity="warning", timeout=10
            )

    def _load_changed(self, worker: Worker, state: WorkerState) -> None:
        """The F5 load ended: the models are in use, or the error is shown (unless quit cancelled it)."""
        if state == WorkerState.SUCCESS:
            self.owns_speculator = True
            self._loaded(worker.result)
            self.notify("Models loaded. Type a message and press Enter.", timeout=4)
            if worker.result.load_note:
                self.notify(worker.result.load_note + ".", title="Models loaded", timeout=8)
        elif state in (WorkerState.ERROR, WorkerState.CANCELLED):
            self.loading = False
            self.query_one("#loading").display = False
            self._update_status()  # not the failed load's last stage: no models (f5 loads them)
            self.refresh_bindings()
            self._update_status()  # it said "loading models…" until the next update
            if state == WorkerState.ERROR and not self._load_cancel.is_set():
                self._show_error("Could not load the models", worker.error)

    # -- the picker's switch (the picker and its logic: ui/screens/model_picker.py) ------------------

    def action_choose_models(self) -> None:
        if self.generating:
            self.notify("Models cannot change mid-reply: stop it (Esc) or let it end first.", severity="warning")
            return
        if self.loading or self.switching is not None:
            self.notify("Models are loading: wait until they are ready.", severity="warning")
            return
        self.push_screen(picker_for(self), self._models_chosen)

    def keep_library_dirs(self, dirs: list[Path]) -> str:
        """The picker added a folder: ``dirs`` become ``[library] dirs`` for this session and
        are saved for the next start (skippy_tui/saved.py). Returns what happened, for the
        picker to say; a failed save keeps the folder for this session and says why."""
        added = [str(d) for d in dirs]
        self.config.set("library", "dirs", added)
        values = {"library": {"dirs": added}}
        try:
            save_defaults(values)
        except ConfigError as e:
            return f"Added for this session only: {e}"
        if overridden(self.config, values):
            where = self.config.source or "the config file"
            return (
                f"Added for this session: {where} sets [library] dirs, which wins at the next start "
                f"(add {added[-1]} there to keep it)."
            )
        return f"Added {added[-1]}: F8 lists its models from now on."

    def _models_chosen(self, choice: ModelChoice | None) -> None:
        if choice is None:
            return
        try:
            spec = choice.spec(self.config)
        except ConfigError as e:
            self._show_error("The config has a problem", e)
            return
        self._start_switch(choice, spec)

    def _start_switch(self, choice: Any, spec: Any) -> None:
        """Load ``spec`` beside the current pair (the picker's choice, or F5's reload)."""
        self.switching = choice
        self._load_cancel = threading.Event()
        self.query_one("#loading").display = True
        keep = " (the current models answer meanwhile)" if self.speculator is not None else ""
        self.query_one("#loading-label", Label).update(f"loading {choice.label}{keep}…")
        self.query_one("#loading-bar", ProgressBar).update(progress=0)
        self.refresh_bindings()
        self._switch_models(spec, self._load_cancel)

    @work(thread=True, exclusive=True, exit_on_error=False, group="switch", name="switch")
    def _switch_models(self, spec: Any, cancel: threading.Event) -> Any:
        load = self._loader()
        return load(spec, lambda stage, f: self.post_message(SwitchProgress(stage, f)), cancel.is_set)

    def on_switch_progress(self, msg: SwitchProgress) -> None:
        if self.switching is not None and self._switched is None:
            self.query_one("#loading-label", Label).update(f"{self.switching.label}: {msg.stage}")
            self.query_one("#loading-bar", ProgressBar).update(progress=round(msg.fraction * 100))

    def _switch_changed(self, worker: Worker, state: WorkerState) -> None:
        """The picker's load ended: swap now (or after the reply in flight), or say it failed."""
        choice = self.switching
        if choice is None:
            return
        if state == WorkerState.SUCCESS:
            self._switched = worker.result
            if self.generating:  # a reply began during the load: it ends on the models it began with
                self.query_one("#loading-label", Label).update(f"{choice.label} ready: switching after this reply")
                self.notify(f"{choice.label} is ready: it takes over when this reply ends.", timeout=4)
            else:
                self._swap_models()
        elif state in (WorkerState.ERROR, WorkerState.CANCELLED):
            self.switching = None
            self.query_one("#loading").display = False
            self.refresh_bindings()
            if state == WorkerState.ERROR and not self._load_cancel.is_set():
                fix = None
                if isinstance(choice, ConfigReload):
                    where = self.config.source or "the config"
                    fix = f"The models loaded before still answer. Correct {where} and press F5 again."
                self.push_screen(
                    SwitchFailedScreen(choice, worker.error, self.speculator is not None, fix),
                    self._quit_if_chosen,
                )

    def _swap_models(self) -> None:
        """Put the loaded pair in place of the old one (closed if this app loaded it)."""
        new, choice = self._switched, self.switching
        assert new is not None and choice is not None and not self.generating
        old, owned = self.speculator, self.owns_speculator
        choice.apply(self.config)
        self._switched = self.switching = None
        keep = choice.keep if isinstance(choice, ConfigReload) else ("n_draft", "p_min")
        if old is not None and keep:  # F3's k and p_min apply to the new pair too, where it can take them
            try:
                new.update(**{k: getattr(old.speculation, k) for k in keep})
            except SkippyError:
                pass
        self.owns_speculator = True
        self._loaded(new)
        self._snapshot_metadata()  # the transcript's models are the ones its next replies come from
        if old is not None and owned:  # the engine touches no native state after its last event
            old.close()
        chat = " The conversation stays: the next reply prefills it." if self.transcript.entries else ""
        reload = isinstance(choice, ConfigReload)
        hint = "" if reload else " Ctrl+P, Save settings as defaults opens on them at the next start."
        self.notify(
            f"Now on {choice.label}.{chat}{hint}", title="Models reloaded" if reload else "Models switched", timeout=7
        )

    def on_unmount(self) -> None:
        """The app is closing: an engine process this app started ends with it (no orphan)."""
        spec = self.speculator
        if spec is not None and self.owns_speculator and getattr(spec, "separate_process", False):
            spec.close()
        if self._relay is not None:
            self._relay.shutdown(wait=False)

    def _show_error(self, title: str, error: BaseException | None) -> None:
        message = str(error) if isinstance(error, SkippyError) else f"{type(error).__name__}: {error}"
        fix = how_to_fix(error, str(self.config.source or config_path())) if error else ""

        self.push_screen(ErrorScreen(title, message, fix), self._quit_if_chosen)

    async def _quit_if_chosen(self, choice: str | None) -> None:
        """An error dialog's Quit: exit 1, but a conversation not kept anywhere is asked about first."""
        if choice == "quit":
            await self._unless_kept("Quit", lambda: self._quit_now(return_code=1))
