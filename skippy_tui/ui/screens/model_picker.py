"""The model picker: choose a target from the library, then its draft, and switch to them.

Two steps in one dialog. Step 1 lists the built-in default pair (to go back to
it), then the library's models (``[library] dirs``, scanned in a thread worker,
so a first scan of large vocabularies never blocks the UI); broken files are
listed dimmed with the reason and cannot be chosen, and a model without a chat
template is marked (a base model: it continues text rather than answering). A
folder can be added there (typed, with its name completed from the disk): the
library is scanned again at once, and the app keeps the folder for the next start.
Step 2 lists the drafts for that target: its own MTP heads ("integrated MTP",
when its file has heads), the compatible models and MTP drafter files (smallest
first), "none" (plain decoding) and "n-gram only" (prompt lookup, no draft
model), then the incompatible ones dimmed with why. An MTP drafter file is no
target: it is listed dimmed in step 1. The dialog returns a
:class:`ModelChoice`; the app loads it in the background while the current
models keep answering, and swaps them only once the new pair is ready (see
``SkippyApp.action_choose_models``).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.suggester import Suggester
from textual.widgets import Button, Input, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerState

from ...engine.errors import ModelFileError
from ...engine.settings import DRAFT_SOURCES
from ...library import (
    INTEGRATED_MTP,
    LABEL_WIDTH,
    DraftCandidate,
    LibraryEntry,
    check_folder,
    draft_candidates,
    entry_label,
    existing,
    human_params,
    human_size,
    scan,
)
from .error import ErrorScreen

if TYPE_CHECKING:
    from ...config import Config
    from ...engine.load.loader import EngineSpec

DraftMode = Literal["model", "none", "ngram", "mtp"]
# [speculation] source values that draft with a draft model: all but n-gram lookup and MTP heads
MODEL_SOURCES = tuple(s for s in DRAFT_SOURCES if s not in ("ngram", "mtp"))
NONE_ID, NGRAM_ID = "plain", "ngram"  # draft row ids; model rows are "t<i>" / "d<i>"
BUILTIN_ID = "builtin"  # the target list's row of the built-in default pair
BUILTIN_LABEL = "the built-in default pair (SmolLM2-135M-Instruct F32 + Q4_1)"
NO_TEMPLATE = "no chat template"


def label(e: LibraryEntry) -> str:
    """File stem and quantization, as the status bar and ``skippy-tui models`` name a model
    (GGUF names often repeat)."""
    return entry_label(e)


def _same_file(a: str, b: str) -> bool:
    """Whether two config paths name the same model file ("": the built-in target)."""
    if not a or not b:
        return a == b
    return os.path.realpath(a) == os.path.realpath(b)


def tidy(path: Path) -> str:
    """A path as the user would write it: ``~/models/x.gguf`` under the home folder."""
    try:
        return "~/" + str(Path(path).relative_to(Path.home()))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class ModelChoice:
    """The pair chosen in the picker.

    ``draft``: the draft model's file (``mode == "model"``), an MTP drafter file
    (``mode == "mtp"``), else ``None``; ``mode``: ``"model"`` (speculate with
    ``draft``), ``"mtp"`` (MTP heads draft: the target's own when ``draft`` is
    ``None``, else the drafter file's), ``"none"`` (plain decoding) or ``"ngram"``
    (n-gram drafting, no draft model). Names are for messages.
    """

    target: Path
    target_name: str
    mode: DraftMode = "none"
    draft: Path | None = None
    draft_name: str = ""
    builtin: bool = False  # the built-in default pair: no paths in the config (target and draft unused)

    @classmethod
    def default_pair(cls) -> ModelChoice:
        """The built-in default pair, as the config says it: no target or draft path."""
        return cls(Path(), BUILTIN_LABEL, "model", None, "", builtin=True)

    @property
    def label(self) -> str:
        """``Gemma 3 270m + SmolLM2 Q4_1``, ``… + integrated MTP``, ``… + X (MTP drafter)``,
        ``… (plain decoding)``, ``… + n-gram drafting``."""
        if self.builtin:
            return self.target_name
        if self.mode == "model":
            return f"{self.target_name} + {self.draft_name}"
        if self.mode == "mtp":
            return f"{self.target_name} + " + (f"{self.draft_name} (MTP drafter)" if self.draft else INTEGRATED_MTP)
        return self.target_name + (" + n-gram drafting" if self.mode == "ngram" else " (plain decoding)")

    def apply(self, cfg: Config) -> None:
        """Set ``cfg``'s target path, draft path and enabled flag, and speculation source.

        A draft model keeps a configured source that uses one (``auto``, ``model``,
        ``ngram+model``), else ``auto``; MTP heads set ``mtp`` (with the drafter file
        as the draft, or none for the target's own heads); "none" sets ``model`` (with
        no draft model that is plain decoding: no n-gram fallback); "n-gram only" sets ``ngram``.
        A new target drops ``[target] chat_template``: an override belongs to the
        model it was written for. The built-in pair clears both paths. Only memory
        changes; the file is not rewritten.
        """
        target = "" if self.builtin else str(self.target)
        if not _same_file(cfg.get("target", "path") or "", target):
            cfg.set("target", "chat_template", "")
        cfg.set("target", "path", target)
        drafts = self.mode in ("model", "mtp")
        cfg.set("draft", "path", str(self.draft) if drafts and self.draft else "")
        cfg.set("draft", "enabled", drafts)
        if self.mode == "mtp":
            cfg.set("speculation", "source", "mtp")
        elif self.mode == "model":
            current = cfg.get("speculation", "source")
            cfg.set("speculation", "source", current if current in MODEL_SOURCES else "auto")
        else:
            cfg.set("speculation", "source", "ngram" if self.mode == "ngram" else "model")

    def spec(self, cfg: Config) -> EngineSpec:
        """What to load: ``cfg`` with this choice applied, on a copy (``cfg`` is unchanged).

        Raises:
            ConfigError: another key of the config is out of bounds.
        """
        trial = copy.deepcopy(cfg)
        self.apply(trial)
        return trial.engine_spec()


class SwitchProgress(Message):
    """Loading the chosen pair: ``stage`` (a short phrase) and ``fraction`` in [0, 1]."""

    def __init__(self, stage: str, fraction: float) -> None:
        super().__init__()
        self.stage = stage
        self.fraction = fraction


class SwitchFailedScreen(ErrorScreen):
    """The chosen pair did not load: what went wrong; the current models (if any) stay.

    ``choice``: a :class:`ModelChoice`, or F5's reload (anything with a ``label``);
    ``fix``: the advice shown (default: F8's).
    """

    def __init__(self, choice: Any, error: BaseException, have_models: bool, fix: str | None = None) -> None:
        from ...engine.errors import SkippyError

        message = str(error) if isinstance(error, SkippyError) else f"{type(error).__name__}: {error}"
        keep = "The models loaded before are still loaded and answer as before. " if have_models else ""
        fix = fix or (
            f"{keep}Press F8 to pick another pair (broken files are listed with the reason), or replace the file "
            "and pick it again."
        )
        super().__init__(f"Could not load {choice.label}", message, fix)
        self.have_models = have_models

    def on_mount(self) -> None:
        if self.have_models:
            self.query_one("#continue", Button).label = "Keep the current models"


class ScanReading(Message):
    """The scan reads a header that is not cached yet (seconds for a large vocabulary)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path


def complete_folder(typed: str) -> str | None:
    """``typed`` completed with the first sub-folder whose name it begins (``~/mo`` →
    ``~/models/``), or None. Hidden folders only when their dot is typed."""
    if not typed:
        return None
    full = Path(typed).expanduser()
    parent, prefix = (full, "") if typed.endswith(os.sep) else (full.parent, full.name)
    try:
        names = sorted(
            d.name
            for d in os.scandir(parent)
            if d.is_dir() and d.name.startswith(prefix) and (prefix.startswith(".") or not d.name.startswith("."))
        )
    except OSError:
        return None
    if not names:
        return None
    return typed + names[0][len(prefix) :] + os.sep


class FolderSuggester(Suggester):
    """Suggests the rest of a folder's name as the user types its path (→ takes it)."""

    def __init__(self) -> None:
        super().__init__(use_cache=False, case_sensitive=True)  # folders come and go

    async def get_suggestion(self, value: str) -> str | None:
        return complete_folder(value)


KeepDirs = Callable[[list[Path]], str]
"""Keeps the library's folders after one was added (the app: for this session and the next
start); returns what it did, for the picker to say."""


class ModelPickerScreen(ModalScreen["ModelChoice | None"]):
    """Choose a target, then a draft for it. Returns a :class:`ModelChoice`, or None (Esc).

    ``dirs``: the library folders; ``cache_dir``: the header caches' root (see
    :func:`library.scan`); ``current``: the loaded target and draft files, marked
    in the lists; ``builtin_loaded``: the built-in default pair is the loaded one;
    ``keep_dirs``: called with the folders once one is added (:data:`KeepDirs`).
    """

    DEFAULT_CSS = """
    ModelPickerScreen #picker-state {
        color: $text-muted;
        margin: 0 0 1 0;
    }
    ModelPickerScreen #picker-list {
        height: auto;
        max-height: 20;
    }
    ModelPickerScreen #picker-folder {
        margin: 0 0 1 0;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back / cancel"),
        Binding("a", "add_folder", "Add a folder"),  # the folder field, once focused, types its own "a"
    ]

    def __init__(
        self,
        dirs: list[Path],
        cache_dir: Path | None,
        current: tuple[Path | None, Path | None],
        builtin_loaded: bool = False,
        keep_dirs: KeepDirs | None = None,
    ) -> None:
        super().__init__()
        self.dirs = dirs
        self.cache_dir = cache_dir
        self.current = {os.path.realpath(p) for p in current if p is not None}
        self.builtin_loaded = builtin_loaded
        self.keep_dirs = keep_dirs
        self._added = ""  # what keep_dirs said, shown once the new folder is scanned
        self.step: Literal["scanning", "target", "judging", "draft"] = "scanning"
        self.entries: list[LibraryEntry] = []
        self.target: LibraryEntry | None = None
        self.candidates: list[DraftCandidate] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as v:
            v.styles.width = 120  # wider than other dialogs (the app's #dialog rule beats DEFAULT_CSS)
            v.border_title = "Choose models · 1 of 2: target"
            v.border_subtitle = "esc cancel"
            yield Static("", id="picker-state", markup=False)
            folder = Input(placeholder="a folder of GGUF files, e.g. ~/models", id="picker-folder", compact=True)
            folder.suggester = FolderSuggester()
            folder.display = False
            yield folder
            yield OptionList(id="picker-list", markup=False)

    def on_mount(self) -> None:
        found = existing(self.dirs)
        if not found:  # the built-in pair, and a field to add a folder
            self._show_targets()
            return
        self._state(f"scanning {self._folders(found)}…")
        self._scan(found)

    @staticmethod
    def _folders(found: list[Path]) -> str:
        return tidy(found[0]) if len(found) == 1 else f"{len(found)} folders ({', '.join(tidy(d) for d in found)})"

    def _state(self, text: str) -> None:
        self.query_one("#picker-state", Static).update(text)

    @property
    def options(self) -> OptionList:
        return self.query_one("#picker-list", OptionList)

    # -- step 1: the target -----------------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="picker")
    def _scan(self, found: list[Path]) -> list[LibraryEntry]:
        return scan(found, self.cache_dir, on_read=lambda p: self.post_message(ScanReading(p)))

    def on_scan_reading(self, msg: ScanReading) -> None:
        if self.step == "scanning":
            self._state(f"scanning… reading the header of {msg.path.name}")

    @on(Worker.StateChanged)
    def _worker_done(self, event: Worker.StateChanged) -> None:
        worker, state = event.worker, event.state
        if state == WorkerState.ERROR:  # a bug, not a bad file (scan never raises for those)
            self.step = "target" if self.step == "scanning" else self.step
            self._state(f"The library scan failed: {type(worker.error).__name__}: {worker.error}")
        elif state != WorkerState.SUCCESS:
            return
        elif self.step == "scanning":
            self.entries = worker.result
            self._show_targets()
        elif self.step == "judging":
            info_error, candidates = worker.result
            if info_error is not None:
                name = label(self.target) if self.target else "That model"
                self._show_targets(f"{name} cannot be read: {info_error}")
            else:
                self.candidates = candidates
                self._show_drafts()

    def _show_targets(self, note: str = "") -> None:
        self.step = "target"
        dialog = self.query_one("#dialog")
        dialog.border_title = "Choose models · 1 of 2: target"
        dialog.border_subtitle = "enter choose · a add a folder · esc cancel"
        good = [e for e in self.entries if not e.broken]
        self._state("\n".join(x for x in (note, self._added, self._summary(good)) if x))
        self._added = ""
        ol = self.options
        ol.clear_options()
        ol.add_option(self._builtin_option())
        ol.add_options([self._target_option(i, e) for i, e in enumerate(self.entries)])
        if good:
            index = self.entries.index(self.target) if self.target in good else self.entries.index(good[0])
            ol.highlighted = ol.get_option_index(f"t{index}")
        else:
            ol.highlighted = 0
        if existing(self.dirs):
            ol.focus()
        else:
            self.action_add_folder()

    def _summary(self, good: list[LibraryEntry]) -> str:
        found = existing(self.dirs)
        if not found:
            where = ", ".join(tidy(d) for d in self.dirs) or "nowhere"
            return (
                f"No model folders found (looked in {where}). Type a folder of GGUF files below (enter adds it "
                "and lists its models; → completes a folder's name), or choose the built-in default pair."
            )
        broken = len(self.entries) - len(good)
        summary = f"{len(good)} model{'s' if len(good) != 1 else ''} in {self._folders(found)}"
        if broken:
            summary += f" ({broken} broken: listed last, dimmed)"
        if not good:
            summary = f"No usable GGUF models in {self._folders(found)}." + (f" {broken} broken." if broken else "")
        return summary

    def _builtin_option(self) -> Option:
        """The built-in default pair, first: the way back to it once another pair is loaded."""
        from ...engine.load.defaults import smollm2_q4_1_path

        try:
            smollm2_q4_1_path()
        except ModelFileError as e:
            return Option(Text(f"{BUILTIN_LABEL}: {e}", style="dim"), BUILTIN_ID, disabled=True)
        row = Text(BUILTIN_LABEL)
        if self.builtin_loaded:
            row.append("  (loaded)", style="bold")
        row.append("\n   shipped with skippy-tui; the F32 target is derived once into the cache", style="dim")
        return Option(row, BUILTIN_ID)

    # -- adding a folder --------------------------------------------------------------------

    @property
    def folder_field(self) -> Input:
        return self.query_one("#picker-folder", Input)

    def action_add_folder(self) -> None:
        if self.step != "target":
            return
        self.folder_field.display = True
        self.folder_field.focus()

    @on(Input.Submitted, "#picker-folder")
    def _folder_entered(self, event: Input.Submitted) -> None:
        """A folder typed: checked, added to the library (kept by ``keep_dirs``) and scanned;
        a bad one is said in the state line and stays in the field to correct."""
        event.stop()
        problem, folder = check_folder(event.value)
        if problem:
            self._state(problem)
            return
        if any(os.path.realpath(d) == os.path.realpath(folder) for d in existing(self.dirs)):
            self._state(f"{tidy(folder)} is in the library already.")
            return
        self.dirs = [*self.dirs, folder]
        self._added = self.keep_dirs(self.dirs) if self.keep_dirs is not None else f"Added {tidy(folder)}."
        self.folder_field.value = ""
        self.folder_field.display = False
        self.step = "scanning"
        self.options.clear_options()
        self._state(f"scanning {self._folders(existing(self.dirs))}…")
        self._scan(existing(self.dirs))

    def _target_option(self, i: int, e: LibraryEntry) -> Option:
        if e.broken:
            reason = (e.error or "").replace(f" {e.path}", "")  # the path is on the line below
            row = Text(f"{label(e):<{LABEL_WIDTH}} broken: {reason}\n   {tidy(e.path)}", style="dim")
            return Option(row, f"t{i}", disabled=True)
        ctx = f"ctx {e.n_ctx_train}" if e.n_ctx_train else ""
        head = f"{label(e):<{LABEL_WIDTH}} {e.architecture:<10} {human_params(e.n_params):>6} "
        if e.mtp_drafter:  # MTP blocks alone: llama.cpp cannot run it as a model of its own
            why = "MTP drafter: a draft for its target"
            row = Text(f"{head}{human_size(e.size_bytes):>10}  {why}\n   {tidy(e.path)}", style="dim")
            return Option(row, f"t{i}", disabled=True)
        row = Text(head)
        row.append(f"{human_size(e.size_bytes):>10}  {ctx:<10} ")
        if e.notes:
            row.append(f"{e.notes} ")
        if not e.has_template:  # a base model: it continues the text rather than answering it
            row.append(f"⚠ {NO_TEMPLATE}", style="bold yellow")
        if os.path.realpath(e.path) in self.current:
            row.append("  (loaded)", style="bold")
        row.append(f"\n   {e.name} · {tidy(e.path)}", style="dim")
        return Option(row, f"t{i}")

    # -- step 2: the draft ------------------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="picker")
    def _judge(self, target: LibraryEntry) -> tuple[str | None, list[DraftCandidate]]:
        from ...engine.load.gguf_info import cached_model_info

        info_cache = self.cache_dir / "gguf-info" if self.cache_dir is not None else None
        try:
            info = cached_model_info(target.path, info_cache)
        except ModelFileError as e:  # changed since the scan
            return str(e), []
        return None, draft_candidates(info, self.entries, self.cache_dir)

    def _show_drafts(self) -> None:
        assert self.target is not None
        self.step = "draft"
        dialog = self.query_one("#dialog")
        dialog.border_title = f"Choose models · 2 of 2: draft for {label(self.target)}"
        dialog.border_subtitle = "enter load · esc back to the targets"
        good = [c for c in self.candidates if c.compatible and not c.integrated]
        bad = [c for c in self.candidates if not c.compatible]
        heads = any(c.integrated and c.compatible for c in self.candidates)
        warning = ""
        if not self.target.has_template:
            warning = (
                f"⚠ {label(self.target)} has no chat template: likely a base model, which continues a text "
                "rather than answering a chat (the shipped Gemma 3 270M answers nonsense). Set [target] "
                "chat_template in the config to give it one.\n"
            )
        self._state(
            warning
            + ("Its own MTP heads can draft; " if heads else "")
            + f"{len(good)} compatible draft model{'s' if len(good) != 1 else ''} (same tokenizer)"
            + (f"; {len(bad)} cannot draft for it (dimmed, with the reason)" if bad else "")
            + ". The conversation stays: the new models prefill it."
        )
        options: list[Option | None] = [self._draft_option(i, c) for i, c in enumerate(self.candidates) if c.compatible]
        options.append(Option("none — plain decoding (the target alone)", NONE_ID))
        options.append(Option("n-gram only — prompt lookup drafts, no draft model", NGRAM_ID))
        if bad:
            options.append(None)
            options += [self._draft_option(i, c) for i, c in enumerate(self.candidates) if not c.compatible]
        ol = self.options
        ol.clear_options()
        ol.add_options(options)
        ol.highlighted = 0
        ol.focus()

    def _draft_option(self, i: int, c: DraftCandidate) -> Option:
        e = c.entry
        head = f"{label(e):<{LABEL_WIDTH}} {human_params(e.n_params):>6} {human_size(e.size_bytes):>10}"
        if c.integrated:  # no file of its own: the heads sit in the target's weights
            n = e.mtp_heads
            heads = f"{n} MTP head{'s' if n != 1 else ''}" if n else "MTP heads"
            head = f"{INTEGRATED_MTP:<{LABEL_WIDTH}} the target's own {heads}, no draft file"
        elif c.mtp:
            head += "  MTP drafter"
        if not c.compatible:
            return Option(Text(f"{head}\n   {c.why_not}", style="dim"), f"d{i}", disabled=True)
        row = Text(head)
        if os.path.realpath(e.path) in self.current and not c.integrated:  # (the target's file is loaded anyway)
            row.append("  (loaded)", style="bold")
        row.append(f"\n   {e.name} · {'in the target' if c.integrated else tidy(e.path)}", style="dim")
        return Option(row, f"d{i}")

    # -- choosing ---------------------------------------------------------------------------

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        oid = event.option.id or ""
        if self.step == "target" and oid == BUILTIN_ID:
            self.dismiss(ModelChoice.default_pair())
        elif self.step == "target" and oid.startswith("t"):
            self.target = self.entries[int(oid[1:])]
            self.step = "judging"
            self.options.clear_options()
            self._state(f"checking which models can draft for {label(self.target)}…")
            self._judge(self.target)
        elif self.step == "draft" and self.target is not None:
            t = self.target
            if oid == NONE_ID:
                self.dismiss(ModelChoice(t.path, label(t), "none"))
            elif oid == NGRAM_ID:
                self.dismiss(ModelChoice(t.path, label(t), "ngram"))
            elif oid.startswith("d"):
                c = self.candidates[int(oid[1:])]
                if c.integrated:
                    self.dismiss(ModelChoice(t.path, label(t), "mtp"))
                else:  # an MTP drafter file drafts as MTP heads, never as a draft model
                    d = c.entry
                    self.dismiss(ModelChoice(t.path, label(t), "mtp" if c.mtp else "model", d.path, label(d)))

    def action_back(self) -> None:
        if self.folder_field.display and self.folder_field.has_focus and existing(self.dirs):
            self.folder_field.display = False  # the folder not added; back to the list
            self.options.focus()
            return
        if self.step in ("draft", "judging"):
            self.workers.cancel_group(self, "picker")
            self._show_targets()
        else:
            self.workers.cancel_group(self, "picker")
            self.dismiss(None)


def picker_for(app: Any) -> ModelPickerScreen:
    """The picker on ``app``'s ``[library] dirs``, marking its loaded models."""
    from ...config import cache_dir
    from ...library import library_dirs

    spec = app.speculator
    current = (
        spec.target_info.path if spec is not None and spec.target_info else None,
        spec.draft_info.path if spec is not None and spec.draft_info else None,
    )
    cfg = app.config
    builtin = spec is not None and not cfg.get("target", "path") and cfg.get("draft", "enabled")
    dirs = library_dirs(cfg.get("library", "dirs"))
    return ModelPickerScreen(dirs, cache_dir(), current, builtin, getattr(app, "keep_library_dirs", None))
