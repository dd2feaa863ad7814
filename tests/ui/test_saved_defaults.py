"""Issue 57.6: what F3, F2 and F8 set is kept for the next start by "Save settings as defaults".

Set in the app (the dialogs, as a user would), saved from the palette's command, then a
new app on the same user dirs: the choices are back. The config file is never written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ui_helpers import SIZE, run, wait_for_screen, wait_until

from skippy_tui.config import Config, config_path, load_config, read_saved
from skippy_tui.ui.app import SkippyApp
from skippy_tui.ui.commands import SkippyCommands
from skippy_tui.ui.screens.model_picker import NONE_ID, ModelPickerScreen
from skippy_tui.ui.screens.system_prompt import SystemPromptScreen
from skippy_tui.ui.screens.tune import TuneScreen


def _launch_config(lib: Path) -> Config:
    """The config as the launcher reads it for the app (saved settings, then the file), with
    one thread per model and the engine in a thread, as the UI tests run."""
    cfg = load_config(saved=True)
    cfg.set("target", "threads", 1)
    cfg.set("target", "threads_batch", 1)
    cfg.set("ui", "engine", "thread")
    if not cfg.get("library", "dirs"):
        cfg.set("library", "dirs", [str(lib)])
    return cfg


async def _tune(app: SkippyApp, pilot: Any, values: dict[str, str]) -> None:
    await pilot.press("f3")
    screen = await wait_for_screen(pilot, app, TuneScreen, 5)
    for key, value in values.items():
        screen.query_one(f"#{key}").value = value
    await pilot.click("#apply")
    await wait_until(pilot, lambda: not isinstance(app.screen, TuneScreen), 5, "F3 to apply")


async def _system_prompt(app: SkippyApp, pilot: Any, text: str) -> None:
    await pilot.press("f2")
    screen = await wait_for_screen(pilot, app, SystemPromptScreen, 5)
    screen.query_one("#system-text").load_text(text)
    await pilot.click("#save")
    await wait_until(pilot, lambda: not isinstance(app.screen, SystemPromptScreen), 5, "F2 to close")


async def _pick_gemma_alone(app: SkippyApp, pilot: Any) -> None:
    await pilot.press("f8")
    picker = await wait_for_screen(pilot, app, ModelPickerScreen, 10)
    await wait_until(pilot, lambda: picker.step == "target", 120, "the library scan")
    ol = picker.options
    rows = [ol.get_option_at_index(i) for i in range(ol.option_count)]
    gemma = next(o.id for o in rows if o.id and "gemma" in str(o.prompt) and not o.disabled)
    ol.highlighted = ol.get_option_index(gemma)
    await pilot.press("enter")
    await wait_until(pilot, lambda: picker.step == "draft", 120, "the draft list")
    ol.highlighted = ol.get_option_index(NONE_ID)
    await pilot.press("enter")


def test_f3_f2_and_f8_choices_saved_as_defaults_are_back_after_a_restart(
    speculator: Any, tmp_path: Path, gemma3_270m: Path
) -> None:
    lib = tmp_path / "models"
    lib.mkdir()
    (lib / gemma3_270m.name).symlink_to(gemma3_270m)
    config_path().parent.mkdir(parents=True, exist_ok=True)
    config_path().write_text("# my settings\n[generation]\nstop = ['END']\n", "utf-8")

    async def first_session() -> None:
        app = SkippyApp(_launch_config(lib), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await _tune(app, pilot, {"n_draft": "3", "temperature": "0.5", "top_k": "7", "max_tokens": "33"})
            await _system_prompt(app, pilot, "Answer like a pirate.")
            await _pick_gemma_alone(app, pilot)
            await wait_until(pilot, lambda: app.speculator is not speculator, 300, "the switch to Gemma")
            try:
                titles = [title for title, _, action in SkippyCommands(app.screen)._commands()]
                assert "Save settings as defaults" in titles  # offered in the palette (Ctrl+P)
                await app.run_action("save_defaults")
                await pilot.pause()
                assert "Settings saved as defaults" in [n.title for n in app._notifications]
            finally:
                app.speculator.close()

    async def second_session() -> None:
        app = SkippyApp(_launch_config(lib), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            assert (app.sampling.temperature, app.sampling.top_k, app.generation.max_tokens) == (0.5, 7, 33)
            assert app.config.get("speculation", "n_draft") == 3
            assert app.transcript.current_system == "Answer like a pirate."
            assert app.config.get("target", "path") == str(lib / gemma3_270m.name)
            assert (app.config.get("draft", "enabled"), app.config.get("speculation", "source")) == (False, "model")
            assert app.generation.stop == ("END",)  # the config file's own keys still apply
            await pilot.press("f3")  # and F3 shows them
            screen = await wait_for_screen(pilot, app, TuneScreen, 5)
            assert (screen.query_one("#temperature").value, screen.query_one("#n_draft").value) == ("0.5", "3")

    run(first_session())
    assert read_saved()["generation"]["system_prompt"] == "Answer like a pirate."
    assert config_path().read_text("utf-8") == "# my settings\n[generation]\nstop = ['END']\n"  # untouched
    run(second_session())
