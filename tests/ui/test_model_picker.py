"""The model picker (F8): choose a target from the library, then its draft; the app
switches to the pair without a restart and keeps the conversation.

The library is a temporary folder of links to the real test models (SmolLM2 F32
and Q4_1, Gemma 3 270M), plus, where a test needs them, a truncated file (listed
broken) and a file whose header reads fine but llama.cpp refuses to load. Live
tests switch the shared default pair to Gemma alone (plain decoding) and run
replies of a few tokens.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ui_helpers import CHAT_JSON, SIZE, run, status_text, ui_config, wait_for_screen, wait_until

from skippy_tui.config import Config
from skippy_tui.engine.chat import prompt_tokens
from skippy_tui.engine.events import StepVerified
from skippy_tui.engine.load import loader
from skippy_tui.engine.settings import DRAFT_SOURCES
from skippy_tui.transcript import Transcript
from skippy_tui.ui.app import SkippyApp
from skippy_tui.ui.screens.model_picker import (
    BUILTIN_ID,
    MODEL_SOURCES,
    NGRAM_ID,
    NO_TEMPLATE,
    NONE_ID,
    ModelChoice,
    ModelPickerScreen,
    SwitchFailedScreen,
)
from skippy_tui.ui.widgets.chat import UserMessage

GEMMA_NAME = "Gemma 3 270m"  # general.name of the Gemma fixture, as the library lists it


def write_unloadable(path: Path) -> None:
    """A GGUF whose header is complete (architecture, vocabulary, a layer) but that has
    none of the weights or hyperparameters llama.cpp needs: the scan lists it, the load fails."""
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), arch="llama")
    w.add_name("half-downloaded")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b", "c"])
    w.add_tensor("blk.0.attn_q.weight", np.ones((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture
def library(tmp_path: Path, smollm2_f32: Path, smollm2_q4_1: Path, gemma3_270m: Path) -> Path:
    """``tmp/models``: links to the three real models and a truncated copy of the Q4_1."""
    lib = tmp_path / "models"
    lib.mkdir()
    for model in (smollm2_f32, smollm2_q4_1, gemma3_270m):
        (lib / model.name).symlink_to(model)
    with smollm2_q4_1.open("rb") as src:
        (lib / "truncated.gguf").write_bytes(src.read(2_000_000))  # cut inside the vocabulary
    return lib


def _config(lib: Path, **sections: dict[str, Any]) -> Config:
    return ui_config(max_tokens=6, library={"dirs": [str(lib)]}, **sections)


def _rows(picker: ModelPickerScreen) -> list[tuple[str, bool, str]]:
    """The picker's list: (option id, disabled, text) per row."""
    ol = picker.options
    out = []
    for i in range(ol.option_count):
        opt = ol.get_option_at_index(i)
        out.append((opt.id or "", opt.disabled, str(opt.prompt)))
    return out


async def _open_picker(app: SkippyApp, pilot: Any) -> ModelPickerScreen:
    await pilot.press("f8")
    picker = await wait_for_screen(pilot, app, ModelPickerScreen, 10)
    await wait_until(pilot, lambda: picker.step == "target", 120, "the library scan")
    return picker


async def _choose(pilot: Any, picker: ModelPickerScreen, option_id: str) -> None:
    """Move the list's cursor to ``option_id`` and press Enter, as a user would."""
    ol = picker.options
    ol.highlighted = ol.get_option_index(option_id)
    await pilot.press("enter")


def _target_id(picker: ModelPickerScreen, name_part: str) -> str:
    rows = _rows(picker)
    return next(oid for oid, disabled, text in rows if name_part in text and not disabled and oid != BUILTIN_ID)


async def _to_drafts(app: SkippyApp, pilot: Any, picker: ModelPickerScreen, name_part: str) -> None:
    await _choose(pilot, picker, _target_id(picker, name_part))
    await wait_until(pilot, lambda: picker.step == "draft", 120, "the draft list")


async def _reply(app: SkippyApp, pilot: Any, text: str) -> Any:
    n = len(app.transcript.entries)
    app.prompt.load_text(text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: not app.generating and len(app.transcript.entries) == n + 2, 240, "the reply")
    return app.transcript.entries[-1]


# -- no model needed ------------------------------------------------------------------------


def test_choice_sets_the_pair_in_the_config_only_when_applied(tmp_path: Path) -> None:
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    cases = [  # (mode, source before, draft path, draft enabled, source after)
        ("model", "ngram", str(draft), True, "auto"),
        ("model", "ngram+model", str(draft), True, "ngram+model"),
        ("none", "auto", "", False, "model"),
        ("ngram", "auto", "", False, "ngram"),
    ]
    for mode, before, d_path, d_enabled, after in cases:
        cfg = ui_config(target={"path": "/old/target.gguf", "chat_template": "chatml"}, speculation={"source": before})
        choice = ModelChoice(target, "T", mode, draft if mode == "model" else None, "D")
        spec = choice.spec(cfg)
        assert cfg.get("target", "path") == "/old/target.gguf"  # a trial: the app's config changes on success only
        assert spec.target.path == target and spec.use_draft == (mode == "model")
        assert spec.speculation.enabled == (mode != "none"), mode
        choice.apply(cfg)
        got = (cfg.get("draft", "path"), cfg.get("draft", "enabled"), cfg.get("speculation", "source"))
        assert got == (d_path, d_enabled, after), mode
        assert (cfg.get("target", "path"), cfg.get("target", "chat_template")) == (str(target), "")
    assert ModelChoice(target, "T", "ngram").label == "T + n-gram drafting"


def test_an_mtp_choice_sets_source_mtp_with_the_drafter_file_or_none(tmp_path: Path) -> None:
    """F8's "integrated MTP" drafts with the target's own heads (no draft file, heads asked
    for); an MTP drafter file is the draft, with source mtp (never loaded as a draft model)."""
    target, drafter = tmp_path / "t.gguf", tmp_path / "mtp.gguf"
    for draft, d_path in ((None, ""), (drafter, str(drafter))):
        cfg = ui_config(speculation={"source": "ngram+model"})
        choice = ModelChoice(target, "T", "mtp", draft, "M")
        spec = choice.spec(cfg)
        assert (spec.use_draft if draft else spec.heads) and spec.speculation.enabled
        assert spec.speculation.source == "mtp"
        assert (spec.draft.path if spec.draft else None) == draft
        choice.apply(cfg)
        assert (cfg.get("draft", "path"), cfg.get("draft", "enabled"), cfg.get("speculation", "source")) == (
            d_path, True, "mtp",
        )  # fmt: skip
    assert ModelChoice(target, "T", "mtp").label == "T + integrated MTP"
    assert ModelChoice(target, "T", "mtp", drafter, "M").label == "T + M (MTP drafter)"
    # a draft model after MTP heads: mtp is no source of a draft model
    cfg = ui_config(speculation={"source": "mtp"})
    ModelChoice(target, "T", "model", drafter, "D").apply(cfg)
    assert cfg.get("speculation", "source") == "auto"
    assert set(MODEL_SOURCES) == set(DRAFT_SOURCES) - {"ngram", "mtp"}


def test_picker_shows_memory_and_mtp_heads_and_switches_to_integrated_mtp(tiny_library: dict[str, Path]) -> None:
    """Targets: notes, the MTP drafter file disabled; drafts: the target's own heads first, the
    drafter file marked; heads llama.cpp cannot run dimmed with why. Choosing integrated MTP
    loads the tiny target drafting with its heads, named in the status bar."""

    async def body() -> None:
        cfg = _config(tiny_library["lib"], ui={"engine": "thread"}, target={"n_ctx": 512})
        app = SkippyApp(cfg, transcript=Transcript.load(CHAT_JSON), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            picker = await _open_picker(app, pilot)
            rows = {
                text.split("\n")[-1].strip().rsplit("/", 1)[-1]: (disabled, text) for _, disabled, text in _rows(picker)
            }
            assert "hybrid, MTP heads: 1" in rows["mtp.gguf"][1] and "recurrent" in rows["mamba.gguf"][1]
            assert rows["drafter.gguf"][0] and "MTP drafter: a draft for its target" in rows["drafter.gguf"][1]
            await _to_drafts(app, pilot, picker, "mtp2 ")
            own = next((d, t) for _, d, t in _rows(picker) if t.startswith("integrated MTP"))
            assert own[0] and "runs one MTP block of a qwen35 model" in own[1]
            await pilot.press("escape")
            await wait_until(pilot, lambda: picker.step == "target", 10, "the target list")
            await _to_drafts(app, pilot, picker, "mtp F32")
            enabled = [(oid, text) for oid, disabled, text in _rows(picker) if not disabled]
            assert enabled[0][1].startswith("integrated MTP") and "own 1 MTP head, no draft file" in enabled[0][1]
            assert any("drafter.gguf" in t and "MTP drafter" in t for _, t in enabled)
            await _choose(pilot, picker, enabled[0][0])
            await wait_until(pilot, lambda: app.speculator is not None and app.switching is None, 120, "the switch")
            spec = app.speculator
            try:
                assert spec.mtp_drafter is not None and spec.drafter is spec.mtp_drafter
                assert (app.config.get("speculation", "source"), app.config.get("draft", "path")) == ("mtp", "")
                assert "spec on mtp" in status_text(app) and "rollback: snapshot" in status_text(app)
                # the drafter file: MTP heads of a file of their own, never a draft model
                picker = await _open_picker(app, pilot)
                await _to_drafts(app, pilot, picker, "mtp F32")
                await _choose(pilot, picker, next(oid for oid, _, t in _rows(picker) if "drafter.gguf" in t))
                await wait_until(pilot, lambda: app.speculator is not spec and app.switching is None, 120, "switch")
                spec = app.speculator
                assert spec.mtp_drafter is not None and spec.mtp_drafter.external and spec.drafter is spec.mtp_drafter
                assert app.config.get("draft", "path") == str(tiny_library["drafter"])
                assert "draft drafter F32" in status_text(app) and "spec on mtp" in status_text(app)
            finally:
                spec.close()

    run(body())


def test_picker_without_library_folders_says_where_it_looked(tmp_path: Path) -> None:
    async def body() -> None:
        cfg = ui_config(library={"dirs": [str(tmp_path / "nowhere")]})
        app = SkippyApp(cfg, transcript=Transcript.load(CHAT_JSON), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            picker = await _open_picker(app, pilot)
            state = str(picker.query_one("#picker-state").render())
            assert "No model folders found" in state and "nowhere" in state
            assert [oid for oid, _, _ in _rows(picker)] == [BUILTIN_ID]  # the built-in pair only
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, ModelPickerScreen), 10, "the picker to close")
            assert app.speculator is None and app.switching is None

    run(body())


def _state(picker: ModelPickerScreen) -> str:
    return str(picker.query_one("#picker-state").render())


def test_a_folder_typed_in_f8_is_scanned_at_once_and_kept(tmp_path: Path, library: Path, cache_dir: Path) -> None:
    """Issue 57.7: with no library folder, F8 said to edit the config and press F5. Now the
    folder is typed there (a bad one is said and stays to correct), the library is read at
    once, and the folder is kept for the next start (saved.toml, not the config file)."""
    from skippy_tui.config import config_path, read_saved

    async def body() -> None:
        cfg = ui_config(library={"dirs": [str(tmp_path / "nowhere")]})
        app = SkippyApp(cfg, transcript=Transcript.load(CHAT_JSON), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            picker = await _open_picker(app, pilot)
            field = picker.folder_field
            assert field.display and app.focused is field  # typed straight away
            for typed, said in [
                ("", "Type the path of a folder"),
                (str(tmp_path / "missing"), "No such folder"),
                (str(library / "truncated.gguf"), "is a file, not a folder"),
            ]:
                field.value = typed
                await pilot.press("enter")
                await pilot.pause()
                assert said in _state(picker), _state(picker)
                assert picker.step == "target" and field.value == typed  # kept, to correct
            field.value = str(library)[:-2]  # "…/mode": completed from the disk
            field.cursor_position = len(field.value)
            await pilot.pause()
            await wait_until(pilot, lambda: field._suggestion == str(library) + "/", 5, "the completion")
            await pilot.press("right")
            assert field.value == str(library) + "/"
            await pilot.press("enter")
            await wait_until(pilot, lambda: picker.step == "target" and len(_rows(picker)) == 5, 120, "the scan")
            assert f"Added {library}: F8 lists its models from now on." in _state(picker)
            assert not field.display and app.focused is picker.options
            assert app.config.get("library", "dirs") == [str(tmp_path / "nowhere"), str(library)]
            assert read_saved()["library"]["dirs"] == [str(tmp_path / "nowhere"), str(library)]
            assert not config_path().exists()
            # "a" opens the field again; Esc there goes back to the list, not out
            await pilot.press("a")
            assert field.display and app.focused is field
            await pilot.press("escape")
            assert not field.display and isinstance(app.screen, ModelPickerScreen)

    run(body())


def test_the_built_in_pair_is_listed_to_switch_back_to(tmp_path: Path, library: Path) -> None:
    """Issue 57.7: once another pair was chosen, F8 offered no way back to the built-in pair."""
    cfg = ui_config(target={"path": str(library / "gemma-3-270m-q4_k_m.gguf"), "chat_template": "chatml"})
    cfg.set("draft", "enabled", False)
    choice = ModelChoice.default_pair()
    spec = choice.spec(cfg)
    assert spec.target.path is None and spec.draft is not None and spec.draft.path is None and spec.use_draft
    choice.apply(cfg)
    assert (cfg.get("target", "path"), cfg.get("target", "chat_template"), cfg.get("draft", "path")) == ("", "", "")
    assert cfg.get("draft", "enabled") and choice.label.startswith("the built-in default pair")

    async def body() -> None:
        app = SkippyApp(_config(library), transcript=Transcript.load(CHAT_JSON), load_models=False)
        chosen: list[Any] = []
        app._models_chosen = chosen.append  # type: ignore[method-assign]  # the choice, not its load
        async with app.run_test(size=SIZE) as pilot:
            picker = await _open_picker(app, pilot)
            oid, disabled, text = _rows(picker)[0]
            assert (oid, disabled) == (BUILTIN_ID, False) and "SmolLM2-135M-Instruct F32 + Q4_1" in text
            await _choose(pilot, picker, BUILTIN_ID)
            await wait_until(pilot, lambda: bool(chosen), 10, "the choice")
            assert chosen[0].builtin

    run(body())


def test_picker_lists_targets_then_compatible_drafts(library: Path, cache_dir: Path) -> None:
    """Broken files dimmed and disabled with the reason; for Gemma, the SmolLM2 files are
    disabled with the vocabulary check's reason, none / n-gram offered; Esc goes back."""

    async def body() -> None:
        app = SkippyApp(_config(library), transcript=Transcript.load(CHAT_JSON), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            picker = await _open_picker(app, pilot)
            rows = _rows(picker)
            assert len(rows) == 5 and rows[0][0] == BUILTIN_ID
            enabled = [text for _, disabled, text in rows if not disabled]
            assert len(enabled) == 4 and any(GEMMA_NAME in t for t in enabled)
            (broken,) = [text for _, disabled, text in rows if disabled]
            assert "truncated" in broken and "broken: truncated or corrupt GGUF" in broken
            # issue 57.7: a base model (no chat template) is marked, and warned about once chosen
            (gemma,) = [text for _, _, text in rows if GEMMA_NAME in text]
            assert NO_TEMPLATE in gemma and all(NO_TEMPLATE not in t for t in enabled if GEMMA_NAME not in t)
            await _to_drafts(app, pilot, picker, GEMMA_NAME)
            assert "gemma-3-270m Q4_K_M has no chat template: likely a base model" in _state(picker)
            rows = _rows(picker)
            assert [oid for oid, disabled, _ in rows if not disabled] == [NONE_ID, NGRAM_ID]
            refused = [text for _, disabled, text in rows if disabled and text]
            assert len(refused) == 2 and all("vocab type differs" in t and "is BPE" in t for t in refused), refused
            await pilot.press("escape")  # back to the targets, not out
            await wait_until(pilot, lambda: picker.step == "target", 10, "the target list")
            assert isinstance(app.screen, ModelPickerScreen) and len(_rows(picker)) == 5
            await _to_drafts(app, pilot, picker, "F32")
            ids = [oid for oid, disabled, _ in _rows(picker) if not disabled]
            assert ids[0].startswith("d") and ids[1:] == [NONE_ID, NGRAM_ID]  # the Q4_1 drafts for the F32

    run(body())


def test_snapshot_draft_step(snap_compare, library: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The draft step for Gemma: none / n-gram, the SmolLM2 files dimmed with the reason."""
    monkeypatch.setenv("HOME", str(library.parent))  # paths show as ~/models/…, the same on every run

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        picker = await _open_picker(app, pilot)
        await _to_drafts(app, pilot, picker, GEMMA_NAME)
        app.query_one("PromptInput").cursor_blink = False
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()

    app = SkippyApp(_config(library), transcript=Transcript.load(CHAT_JSON), load_models=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


# -- switching on the real models ---------------------------------------------------------


def test_switch_to_gemma_keeps_the_conversation(speculator: Any, library: Path) -> None:
    """Default pair → Gemma alone: the chat stays, the next reply prefills it on Gemma.

    In a thread (``[ui] engine = "thread"``): the test tokenizes with the loaded Gemma."""

    async def body() -> None:
        app = SkippyApp(_config(library, ui={"engine": "thread"}), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            first = await _reply(app, pilot, "Say hi.")
            assert first.finish.reason in ("max_tokens", "eos")
            picker = await _open_picker(app, pilot)
            await _to_drafts(app, pilot, picker, GEMMA_NAME)
            await _choose(pilot, picker, NONE_ID)
            await wait_until(pilot, lambda: app.speculator is not speculator, 300, "the switch")
            gemma = app.speculator
            try:
                assert app.owns_speculator and app.switching is None
                assert gemma.target_info.name == GEMMA_NAME and gemma.drafter is None
                assert "gemma-3-270m Q4_K_M" in status_text(app) and "no draft" in status_text(app)
                assert not app.query_one("#loading").display
                assert app.config.get("target", "path") == str(library / "gemma-3-270m-q4_k_m.gguf")
                assert (app.config.get("draft", "path"), app.config.get("draft", "enabled")) == ("", False)
                assert app.transcript.models["target"]["name"] == GEMMA_NAME
                assert app.transcript.models["draft"] is None
                # the conversation is still on screen, and the new reply is generated on it
                before = app.transcript.engine_messages()
                second = await _reply(app, pilot, "And bye?")
                assert second.finish.reason in ("max_tokens", "eos") and second.content
                assert [e.content for e in app.transcript.entries[:2]] == ["Say hi.", first.content]
                assert len(app.chat.query(UserMessage)) == 2
                messages = [*before, {"role": "user", "content": "And bye?"}]
                whole = prompt_tokens(gemma.target, gemma.template, messages)
                alone = prompt_tokens(gemma.target, gemma.template, messages[-1:])
                started = second.started
                assert started.n_prompt == len(whole) > len(alone)  # the earlier turns were prefilled
                assert started.target_sync.kind == "reset" and not second.steps[0].proposed
            finally:
                gemma.close()

    run(body())


def test_failed_switch_keeps_the_old_models(speculator: Any, library: Path) -> None:
    """A file llama.cpp refuses: an error dialog, then the old pair answers as before."""
    write_unloadable(library / "half-downloaded.gguf")

    async def body() -> None:
        app = SkippyApp(_config(library), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            picker = await _open_picker(app, pilot)
            await _to_drafts(app, pilot, picker, "half-downloaded")
            assert all(disabled for oid, disabled, _ in _rows(picker) if oid.startswith("d"))  # tokenizers differ
            await _choose(pilot, picker, NONE_ID)
            error = await wait_for_screen(pilot, app, SwitchFailedScreen, 120)
            assert "half-downloaded" in str(error.query_one("#dialog").border_title)
            assert "still loaded" in str(error.query_one("#error-fix").render())
            assert str(error.query_one("#continue").label) == "Keep the current models"
            assert app.speculator is speculator and app.switching is None
            assert app.config.get("target", "path") == ""  # unchanged: still the default pair
            await pilot.click("#continue")
            await wait_until(pilot, lambda: not isinstance(app.screen, SwitchFailedScreen), 10, "the dialog to close")
            reply = await _reply(app, pilot, "Say hi.")
            assert reply.finish.reason in ("max_tokens", "eos") and reply.content
            assert "target SmolLM2-135M-In" in status_text(app) and "draft SmolLM2-135M-Instruct Q4_1" in status_text(
                app
            )

    run(body())


def test_switch_waits_for_the_reply_in_flight(speculator: Any, library: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """F8 mid-reply is refused; a pair that finishes loading while a reply runs takes over when it ends."""
    speculator.update(n_draft=2, source="model")
    reply_gate, load_gate = threading.Event(), threading.Event()

    class Gated:
        """The shared pair; after each step the engine thread waits for ``reply_gate``."""

        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

        def run(self, messages: Any, gen: Any, cancel: threading.Event) -> Any:
            for ev in self._inner.run(messages, gen, cancel):
                yield ev
                if isinstance(ev, StepVerified):
                    reply_gate.wait(120)

    real_load = loader.load_speculator

    def held_load(*args: Any) -> Any:  # the real load, returned only once the test says so
        spec = real_load(*args)
        load_gate.wait(120)
        return spec

    monkeypatch.setattr(loader, "load_speculator", held_load)
    gated = Gated(speculator)

    async def body() -> None:
        app = SkippyApp(_config(library), speculator=gated)
        async with app.run_test(size=SIZE) as pilot:
            app.prompt.load_text("Say hi.")
            await pilot.press("enter")
            try:
                await wait_until(pilot, lambda: app.generating, 10, "the reply to start")
                await pilot.press("f8")
                await pilot.pause()
                assert not isinstance(app.screen, ModelPickerScreen)  # refused mid-reply, with a word why
                assert any("mid-reply" in n.message for n in app._notifications)
            finally:
                reply_gate.set()
            await wait_until(pilot, lambda: not app.generating, 120, "the reply")
            reply_gate.clear()
            picker = await _open_picker(app, pilot)
            await _to_drafts(app, pilot, picker, GEMMA_NAME)
            await _choose(pilot, picker, NONE_ID)
            await wait_until(pilot, lambda: app.switching is not None, 10, "the load to start")
            app.prompt.load_text("And bye?")  # sent while the new pair loads: the old pair answers
            await pilot.press("enter")
            try:
                await wait_until(pilot, lambda: app.generating, 10, "the second reply to start")
                load_gate.set()
                await wait_until(pilot, lambda: app._switched is not None, 300, "the new pair to load")
                assert app.generating and app.speculator is gated  # the reply in flight keeps its models
                assert "after this reply" in str(app.query_one("#loading-label").render())
            finally:
                load_gate.set()
                reply_gate.set()
            await wait_until(pilot, lambda: not app.generating and app.speculator is not gated, 120, "the swap")
            try:
                assert app.speculator.target_info.name == GEMMA_NAME and app.switching is None
                last = app.transcript.entries[-1]
                assert last.finish.reason in ("max_tokens", "eos")
                assert last.steps[0].proposed  # that reply came from the old pair (Gemma alone has no draft)
            finally:
                app.speculator.close()

    run(body())


def test_f5_with_models_loaded_rereads_the_config(speculator: Any, library: Path, tmp_path: Path) -> None:
    """F5 did nothing once models were loaded, though F1 and the README say it re-reads the
    config. Now: no change says so; a speculation key applies to the loaded pair from the next
    step; a new target loads the pair again as F8 does (the conversation stays) and the
    session's F3 k carries over unless the file changed it; a bad file keeps the models."""
    from skippy_tui.config import load_config
    from skippy_tui.engine.load.loader import LIVE_SPECULATION
    from skippy_tui.ui.screens.error import ErrorScreen

    cfg_file = tmp_path / "config.toml"
    cfg_file.write_text("[generation]\nmax_tokens = 6\n", "utf-8")

    def reread() -> Config:
        cfg = load_config(cfg_file)
        for key, value in {"threads": 1, "threads_batch": 1}.items():
            cfg.set("target", key, value)
        cfg.set("ui", "engine", "thread")
        return cfg

    original = speculator.speculation

    def notes(app: SkippyApp) -> list[str]:
        return [n.message for n in app._notifications]

    async def body() -> None:
        app = SkippyApp(reread(), speculator=speculator, reload_config=reread)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f5")
            await wait_until(
                pilot, lambda: "config.toml has no changes: the models stay loaded." in notes(app), 5, "ok"
            )
            cfg_file.write_text("[generation]\nmax_tokens = 6\n[speculation]\np_min = 0.25\n", "utf-8")
            await pilot.press("f5")
            await wait_until(pilot, lambda: speculator.speculation.p_min == 0.25, 5, "p_min from the file")
            assert app.speculator is speculator and app.switching is None
            assert any("p_min = 0.25 from the next step" in n for n in notes(app))
            first = await _reply(app, pilot, "Say hi.")
            speculator.update(n_draft=3)  # as F3 does with models loaded
            cfg_file.write_text("[speculation\n", "utf-8")  # broken: an error, nothing changes
            await pilot.press("f5")
            await wait_for_screen(pilot, app, ErrorScreen, 10)
            await pilot.click("#continue")
            await wait_until(pilot, lambda: not isinstance(app.screen, ErrorScreen), 5, "dismiss")
            assert app.speculator is speculator and speculator.speculation.n_draft == 3
            # another target: loaded again as the picker switches, F3's k kept (the file left n_draft alone)
            gemma = library / "gemma-3-270m-q4_k_m.gguf"
            cfg_file.write_text(f'[generation]\nmax_tokens = 6\n[target]\npath = "{gemma}"\n', "utf-8")
            await pilot.press("f5")
            await wait_until(pilot, lambda: app.speculator is not speculator, 300, "the reload")
            new = app.speculator
            try:
                assert app.owns_speculator and app.switching is None and not app.query_one("#loading").display
                assert new.target_info.name == GEMMA_NAME and new.model_drafter is None  # n-gram drafting only
                assert new.speculation.n_draft == 3
                assert any("Now on the models in config.toml" in n for n in notes(app))
                second = await _reply(app, pilot, "And bye?")
                assert second.content and [e.content for e in app.transcript.entries[:2]] == ["Say hi.", first.content]
            finally:
                new.close()

    try:
        run(body())
    finally:
        speculator.update(**{k: getattr(original, k) for k in LIVE_SPECULATION})
