"""The Textual app: its widgets, keys and state, and the wiring of the jobs it is made of.

Each job is a mixin in its own module, which says what it owns and relies on:

- ``generation.py``: send, the generate worker, engine events into the widgets, stop / regenerate / edit;
- ``context_fit.py``: the input counted against the context window, and the notes when a message does not fit;
- ``loading.py``: F5 and the picker's switch (F8), their workers and the load error dialog;
- ``files.py``: save / open transcripts, the chat history, asking before a chat is dropped;
- ``replies.py``: the chat filled from the transcript, which reply the panel shows, copying;
- ``tuning.py``: system prompt (F2), tune (F3), speculation on/off (F4);
- ``layout.py``: where the panel goes (F6); ``status.py``: the status bar.

This module keeps what ties them together: compose and mount, the bindings and which
apply now, the message handlers (each handed to its job), quit, and the few actions
that belong to no job. Quit sets the reply's cancel event, aborts a native decode in
flight, stops a load, and exits.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

from textual import events, on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.command import CommandPalette
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Input, Label, ProgressBar, TextArea
from textual.worker import Worker, WorkerState

from ..config import Config, ConfigError
from ..engine.sampling.params import SamplingParams
from ..engine.settings import GenerationSettings
from ..engine.stats import AcceptanceStats
from ..transcript import Transcript
from .commands import SkippyCommands
from .context_fit import ContextFitMixin
from .files import FilesMixin
from .generation import FLUSH_HZ, GenerationMixin
from .layout import LayoutMixin, MainArea
from .loading import LoadingMixin
from .priority import INPUT_EVENTS, relay_executor, room_making_driver, yield_cpu_to_engine
from .replies import ReplyViewMixin
from .screens.confirm import DISCARD, ConfirmDiscardScreen
from .screens.help import HelpScreen
from .status import StatusBar, StatusMixin
from .themes import UiState, load_themes
from .tuning import TuningMixin
from .widgets.chat import AssistantMessage, ChatView
from .widgets.footer import KeyFooter
from .widgets.panel import SpeculationPanel
from .widgets.prompt import PromptInput

QUIT_GRACE_S = 3.0
"""How long a quit mid-reply waits for the reply to stop (the engine checks between steps)
before it quits without it; a second Ctrl+Q does not wait."""

# the app's own actions: off while a dialog (not the command palette) is open
CHAT_ACTIONS = frozenset(
    {"stop", "new_chat", "regenerate", "edit_last", "system_prompt", "tune", "toggle_speculation"}
    | {"load_models", "toggle_origin", "save", "change_theme", "open_transcript"}
    | {"help", "show_reply", "copy_reply", "copy_code"}
    | {"choose_models", "reload_config"}
)
CHAT_ACTIONS |= {"history"}  # issue 10: the chat history screen
CHAT_ACTIONS |= {"save_defaults"}  # issue 57.6: F2/F3/F8's choices kept for the next start
# what each app key does, for the help screen (F1); a binding's short description when missing
KEY_HELP = {
    "stop": "stop the reply (within one step); cancel an edit; close the keys panel",
    "new_chat": "new chat (the KV caches start empty)",
    "regenerate": "generate the last reply again (the KV caches roll back)",
    "edit_last": "put your last message back in the input; enter resends it",
    "system_prompt": "system prompt, from the next reply (the turns before keep theirs)",
    "tune": "speculation and sampling settings: n_draft, p_min, temperature, top_k/p, min_p, seed, …",
    "toggle_speculation": "speculation on / off",
    "load_models": "load the models (into a replayed transcript, to continue it)",
    "reload_config": "with models loaded: re-read the config (a changed model reloads them)",
    "choose_models": "choose the target and draft from the model library; the conversation stays",
    "toggle_origin": "colour replies by origin: accepted draft tokens vs target tokens",
    "save": "save the transcript (Markdown + JSON)",
    "change_theme": "theme",
    "history": "chat history: every chat, saved after each reply; open, rename, delete",
    "help": "this help",
    "show_reply(-1)": "show the previous reply's steps in the panel",
    "show_reply(1)": "show the next reply's steps in the panel",
    "copy_reply": "copy the reply the panel shows to the clipboard",
    "copy_code": "copy a code block of that reply (a list to pick from when it has several)",
    "quit": "quit (also mid-reply)",
}


class SkippyApp(
    GenerationMixin,
    ContextFitMixin,
    LoadingMixin,
    FilesMixin,
    ReplyViewMixin,
    TuningMixin,
    LayoutMixin,
    StatusMixin,
    App[None],
):
    """skippy-tui: chat through speculative decoding and watch each step."""

    CSS_PATH = "app.tcss"
    TITLE = "skippy-tui"
    COMMANDS: ClassVar = App.COMMANDS | {SkippyCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "help", "Help"),  # first: the footer shows what fits, and this one leads to the rest
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+n", "new_chat", "New"),
        Binding("ctrl+r", "regenerate", "Regenerate"),
        Binding("ctrl+l", "edit_last", "Edit last"),
        Binding("f2", "system_prompt", "System"),
        Binding("f3", "tune", "Tune"),
        Binding("f4", "toggle_speculation", "Spec on/off"),
        Binding("f5", "load_models", "Load models"),
        # the same key once models are loaded (Textual tries the next binding of a key whose action is off)
        Binding("f5", "reload_config", "Reload config"),
        Binding("f8", "choose_models", "Models"),  # F6 is the panel's, F7 the input's select-all
        Binding("ctrl+o", "toggle_origin", "Origins"),
        Binding("ctrl+s", "save", "Save"),
        Binding("ctrl+t", "change_theme", "Theme"),
        Binding("f9", "history", "History", show=False),  # off the footer: F1 and the palette list it
        Binding("alt+up", "show_reply(-1)", "Previous reply", show=False),
        Binding("alt+down", "show_reply(1)", "Next reply", show=False),
        # priority: a terminal sends Alt+C as ESC c, which Textual reads as a printable "c" too,
        # and the focused input (or on_key's redirect to it) typed it instead of copying
        Binding("alt+c", "copy_reply", "Copy reply", show=False, priority=True),
        Binding("alt+k", "copy_code", "Copy code block", show=False, priority=True),
        Binding("f6", "toggle_panel", "Panel", priority=True),  # over the input's own F6 (select line)
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(
        self,
        config: Config,
        *,
        speculator: Any = None,
        transcript: Transcript | None = None,
        transcript_path: Path | None = None,
        load_models: bool = True,
        config_error: BaseException | None = None,
        yield_cpu: bool = False,
        reload_config: Callable[[], Config] | None = None,
        engine_started: Any = None,
    ) -> None:
        """``reload_config`` reads the config again as the launcher did (file, then flags;
        raises ConfigError): loading (F5) calls it, so a fixed or edited file takes effect.
        ``engine_started``: an engine process the launcher started on the config's models
        (``engine.process.start_engine``); the first load takes it over."""
        super().__init__()
        self.engine_started = engine_started
        # lower the UI's threads below the engine's (ui/priority.py); the launcher asks for it
        self._yield_cpu = yield_cpu
        self._quitting = False  # a quit waits for the reply in flight to stop (action_quit)
        self._relay: ThreadPoolExecutor | None = None  # an engine process's events, at the UI's priority
        self.config = config
        self.speculator = speculator
        self.owns_speculator = False  # True when this app loaded it (and so closes it)
        self.transcript = transcript or Transcript(system_prompt=config.get("generation", "system_prompt"))
        self.transcript_path = transcript_path
        self.replay = transcript is not None and speculator is None and not load_models
        self._want_load = load_models and speculator is None and config_error is None
        self._config_error = config_error
        self.state = UiState.load()
        self.sampling = SamplingParams()
        self.generation = GenerationSettings()
        try:
            gen = config.generation()
            self.generation, self.sampling = gen, gen.sampling
        except ConfigError as e:
            self._config_error = self._config_error or e
            self._want_load = False
        self._reload_config = reload_config
        # as read, to tell what F3/F4 changed in this session from what the file says
        self._config_read = copy.deepcopy(config.values)
        self._sampling_read = self.sampling
        self.session_stats = AcceptanceStats()
        self.color_origin = bool(config.get("ui", "color_origin"))
        self._n_past = 0
        self._n_ctx = 0
        self._init_reply_view()
        self._init_generation()
        self._init_loading()
        self._init_layout()
        self._init_files()
        self._init_context_fit()
        self._init_theme()

    def _init_theme(self) -> None:
        """Register the theme files and pick the remembered theme, before the first CSS pass
        (picked on mount, every widget was styled twice: a fifth of the start-up CPU)."""
        themes, self._theme_errors = load_themes()
        for theme in themes:
            self.register_theme(theme)
        wanted = self.state.theme_for(self.config.get("ui", "theme"))
        if wanted not in self.available_themes:
            self._theme_errors.append(f"theme {wanted!r} not found; using skippy-dark")
            wanted = "skippy-dark" if "skippy-dark" in self.available_themes else "textual-dark"
        self.theme = wanted

    # -- widgets, mount, keys ----------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with MainArea(id="main"):
            with Vertical(id="chat-column"):
                with Horizontal(id="loading"):
                    yield Label("", id="loading-label")
                    yield ProgressBar(total=100, show_eta=False, id="loading-bar")
                # the transcript's messages composed with the app, not mounted after its first layout
                yield ChatView(*self._transcript_widgets(), id="chat", classes="-origin" if self.color_origin else "")
                yield PromptInput(history=self.state.history, id="prompt")
            yield SpeculationPanel(id="panel")
        yield StatusBar(id="status")
        yield KeyFooter(compact=True)

    @property
    def chat(self) -> ChatView:
        return self.query_one(ChatView)

    @property
    def panel(self) -> SpeculationPanel:
        return self.query_one(SpeculationPanel)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one(PromptInput)

    # -- input while the engine decodes (ui/priority.py) ---------------------------------------

    def get_driver_class(self) -> type[Any]:
        return room_making_driver(super().get_driver_class(), self._input_arrived)

    @property
    def _engine_room(self) -> Callable[[bool], None] | None:
        """The engine's ``ui_input`` (an engine process pauses between steps while it is
        told the UI is busy), or None for an engine that does not pause."""
        return getattr(self.speculator, "ui_input", None)

    def _input_arrived(self) -> None:
        """Textual's input thread, on a key, click, scroll or paste: an engine process waits
        between steps until the UI has answered (``on_event`` says when)."""
        room = self._engine_room
        if self.generating and room is not None:
            room(True)

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, INPUT_EVENTS) and self._engine_room is not None:
            # after the event's handlers and a redraw (also when the reply ended meanwhile)
            self.call_after_refresh(self._input_answered)
        await super().on_event(event)

    def _input_answered(self) -> None:
        room = self._engine_room
        if room is not None:
            room(False)

    async def on_mount(self) -> None:
        # before any worker starts: the engine's threads must keep their priority
        if self._yield_cpu and yield_cpu_to_engine(asyncio.get_running_loop()):
            self._relay = relay_executor()
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        if self._theme_errors:
            self.notify("\n".join(self._theme_errors), title="Skipped theme files", severity="warning", timeout=10)
        self.query_one("#loading").display = False
        self._transcript_shown()  # its widgets were composed with the app
        # runs only while a reply streams: an idle app wakes for nothing (the engine may be busy)
        self._flush_timer = self.set_interval(1 / FLUSH_HZ, self._flush_steps, pause=True)
        self.prompt.focus()
        if self.speculator is not None:
            self._loaded(self.speculator)
        elif self._config_error is not None:
            self._show_error("The config has a problem", self._config_error)
        elif self._want_load:
            self.action_load_models()
        self._update_status()

    def _theme_changed(self, theme: Any) -> None:
        self.state.theme = theme.name
        self.state.config_theme = self.config.get("ui", "theme")
        self.state.save()
        self.panel.restyle()
        for msg in self.chat.query(AssistantMessage):
            msg.refresh_origin(force=True)

    def get_system_commands(self, screen: Screen):
        # Theme and Quit are in SkippyCommands with their keys; keep the rest.
        for cmd in super().get_system_commands(screen):
            if cmd.title not in ("Theme", "Quit"):
                yield cmd

    def key_for(self, action: str) -> str:
        """The key that runs ``action`` (``"tune('seed')"`` falls back to the key of ``tune``), or ""."""
        name = action.split("(")[0]
        for wanted in (action, name):
            for b in self.BINDINGS:
                if isinstance(b, Binding) and b.action == wanted:
                    return self.get_key_display(b)
        return ""

    def key_help(self) -> list[tuple[str, str]]:
        """(keys, what they do) for every app binding, in binding order, one row per action."""
        rows: dict[str, list[str]] = {}
        for b in self.BINDINGS:
            if isinstance(b, Binding):
                keys = [k.replace("escape", "esc").replace("up", "↑").replace("down", "↓") for k in b.key.split(",")]
                rows.setdefault(b.action, []).extend(keys)
        descriptions = {b.action: b.description for b in self.BINDINGS if isinstance(b, Binding)}
        return [(" / ".join(keys), KEY_HELP.get(action, descriptions[action].lower())) for action, keys in rows.items()]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        screen = self.screen
        if action in CHAT_ACTIONS and isinstance(screen, ModalScreen) and not isinstance(screen, CommandPalette):
            return False  # a dialog is open: its own keys apply (ctrl+s saves the system prompt there)
        if action == "load_models":
            return self.speculator is None and not self.loading and self.switching is None
        if action == "reload_config":
            return self.speculator is not None and not self.loading and self.switching is None
        if action == "stop":
            return True
        if action in ("regenerate", "edit_last", "new_chat") and self.generating:
            return None
        return True

    def on_resize(self) -> None:
        if self.query(StatusBar):  # a resize can come before the layout is composed
            self._update_status()

    # -- messages, each handed to the job that handles it --------------------------------------
    # (an @on handler must sit on the App class itself: Textual collects them per message pump
    # class, and never from a plain mixin)

    @on(PromptInput.Submitted)
    async def _submitted(self, event: PromptInput.Submitted) -> None:
        await self._send(event.text)

    @on(TextArea.Changed, "#prompt")
    def _prompt_edited(self) -> None:
        self._prompt_changed()

    @on(AssistantMessage.Selected)
    def _select_reply(self, event: AssistantMessage.Selected) -> None:
        self._pick_reply(event.message)

    @on(SpeculationPanel.InspectStep)
    def _inspect(self, event: SpeculationPanel.InspectStep) -> None:
        self._inspect_step(event.steps, event.index)

    @on(Worker.StateChanged)
    async def _worker_changed(self, event: Worker.StateChanged) -> None:
        worker, state = event.worker, event.state
        if worker.group == "load":
            self._load_changed(worker, state)
        elif worker.group == "switch":
            self._switch_changed(worker, state)
        elif worker.group == "generate" and state == WorkerState.ERROR:
            await self._generate_failed(worker)

    # -- quit, help, and the actions of no one job ----------------------------------------------

    async def action_quit(self) -> None:
        screen = self.screen
        if isinstance(screen, ConfirmDiscardScreen) and screen.action_name == "Quit":
            screen.dismiss(DISCARD)  # ctrl+q twice: quit without saving
            return
        if self.generating and not self._quitting:
            # stop the reply first, as Esc does: its text is kept in the chat, which is then
            # saved (or asked about) once the engine is idle; _finish_reply goes on with the quit
            self._quitting = True
            self._stop_reply()
            self.set_timer(QUIT_GRACE_S, self._quit_unstopped)
            return
        await self._go_on_quitting()  # nothing in flight, or pressed again while the reply stops

    async def _go_on_quitting(self) -> None:
        """The quit itself: the chat kept (or asked about) first, then the app ends."""
        self._quitting = False
        await self._unless_kept("Quit", self._quit_now)

    async def _quit_unstopped(self) -> None:
        """The reply did not stop within QUIT_GRACE_S of a quit: quit without it."""
        if self._quitting and self.generating:
            await self._go_on_quitting()

    def _quit_now(self, return_code: int = 0) -> None:
        self._cancel.set()
        self._load_cancel.set()
        if self.generating and self.speculator is not None:
            self.speculator.abort()
        if self._switched is not None:  # loaded by the picker, never used
            self._switched.close()
            self._switched = None
        self.exit(return_code=return_code)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def on_key(self, event: events.Key) -> None:
        """A character typed while the chat, the panel or nothing has the focus goes to the input,
        not nowhere."""
        if not (event.is_printable and event.character) or self.screen is not self.screen_stack[0]:
            return
        if isinstance(self.focused, (TextArea, Input)) or not self.prompt.display:
            return
        event.stop()
        self.prompt.focus()
        self.prompt.insert(event.character)

    def action_toggle_origin(self) -> None:
        self.color_origin = not self.color_origin
        self.chat.set_class(self.color_origin, "-origin")
        for msg in self.chat.query(AssistantMessage):
            msg.refresh_origin(force=True)
        self.notify(
            "Origin colouring on: accepted draft tokens vs target tokens." if self.color_origin else "Markdown view.",
            timeout=2,
        )
