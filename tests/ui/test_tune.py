"""The F3 dialog (speculation and sampling): its fields, bounds and refusals, keys, the palette,
the sources it offers, and what it changes in the next reply."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from test_app_mtp import load
from textual.widgets import Input, Select
from ui_helpers import SIZE, one_read, replay_app, run, status_text, ui_config, wait_for_screen, wait_until

from skippy_tui.engine.bounds import ContextCapacity, validate_capacity
from skippy_tui.engine.sampling.params import SamplingParams
from skippy_tui.engine.settings import DRAFT_SOURCES
from skippy_tui.ui.app import SkippyApp
from skippy_tui.ui.screens.tune import TUNE_FIELDS, TuneScreen


async def _enter_each(
    pilot: Any, app: Any, screen: TuneScreen, cases: list[tuple[str, str, str]]
) -> AsyncIterator[tuple[str, str, str, str]]:
    """For each ``(field, value, message)``: type ``value`` into the field and press Enter; the
    dialog must stay open; yields the case and the error it shows, then puts the field back."""
    for key, value, message in cases:
        field = screen.query_one(f"#{key}")
        good, field.value = field.value, value
        field.focus()
        await pilot.press("enter")
        assert app.screen is screen, key
        yield key, value, message, str(screen.query_one("#tune-error").render())
        field.value = good


def test_tune_dialog_names_the_field_and_what_it_allows() -> None:
    bad = [
        (
            "n_draft",
            "abc",
            "n_draft: 'abc' is not \"auto\" or a whole number; allowed: tokens per proposal (k): auto, or 1..4096",
        ),
        ("n_draft", "2.5", "n_draft: '2.5' is not \"auto\" or a whole number; allowed:"),
        ("n_draft", "0", "n_draft = 0 is out of bounds; allowed: tokens per proposal (k): auto, or 1..4096"),
        ("top_k", "-1", "top_k = -1 is out of bounds; allowed: keep the k most likely tokens: 0 = off, or k ≥ 1"),
        ("top_p", "1.5", "top_p = 1.5 is out of bounds; allowed: nucleus: 0..1, 1 = off"),
        ("min_p", "x", "min_p: 'x' is not a number; allowed: drop tokens below min_p × the top p: 0..1, 0 = off"),
        ("max_tokens", "0", "max_tokens = 0 is out of bounds; allowed: reply length cap: 1..1048576"),
        ("max_tokens", "many", "max_tokens: 'many' is not a whole number; allowed: reply length cap: 1..1048576"),
    ]

    async def body() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        before = (app.sampling, app.generation)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f3")
            screen = await wait_for_screen(pilot, app, TuneScreen, 5)
            async for key, value, message, shown in _enter_each(pilot, app, screen, bad):
                assert message in shown, (key, value, shown)
                assert "invalid literal" not in shown
            assert (app.sampling, app.generation) == before

    run(body())


def test_tune_dialog_says_how_long_a_draft_the_loaded_batch_can_verify() -> None:
    """F3 allows n_draft up to 4096, but a verify batch of k + 1 rows must fit the loaded n_batch (512
    by default): the refusal gives the largest k that fits and where to raise the batch."""

    def apply(values: dict) -> None:  # what Speculator.update checks for a longer k
        validate_capacity(ContextCapacity("target", 512, 512), ContextCapacity("draft", 512, 512), values["n_draft"])

    async def body() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            screen = TuneScreen(4, 0.0, app.sampling, apply=apply)
            await app.push_screen(screen)
            screen.query_one("#n_draft", Input).value = "1000"
            screen.query_one("#n_draft").focus()
            await pilot.press("enter")
            assert app.screen is screen
            shown = str(screen.query_one("#tune-error").render())
            assert shown.startswith("n_draft is at most 511 with the models loaded: target.n_batch = 512"), shown
            assert "Set n_batch under [target] in the config file" in shown
            screen.query_one("#n_draft", Input).value = "511"
            await pilot.press("enter")
            await wait_until(pilot, lambda: app.screen is not screen, 5, "511 to apply")

    run(body())


def test_tune_dialog_sets_top_k_top_p_min_p_and_max_tokens() -> None:
    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=8), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f3")
            screen = await wait_for_screen(pilot, app, TuneScreen, 5)
            assert screen.query_one("#max_tokens").value == "8"
            values = {"top_k": "7", "top_p": "0.5", "min_p": "0.1", "max_tokens": "33"}
            for key, value in values.items():
                screen.query_one(f"#{key}").value = value
            await pilot.click("#apply")
            await wait_until(pilot, lambda: not isinstance(app.screen, TuneScreen), 5, "apply")
            assert (app.sampling.top_k, app.sampling.top_p, app.sampling.min_p) == (7, 0.5, 0.1)
            assert app.generation.max_tokens == 33
            assert "max_tokens=33 from the next reply" in list(app._notifications)[-1].message
            # the palette's own "Set …" entries name their field; one opens the dialog on it, showing the values set
            from skippy_tui.ui.commands import SkippyCommands

            commands = {action: title for title, _, action in SkippyCommands(app.screen)._commands()}
            assert all(commands[f"tune('{key}')"].startswith(f"Set {key}") for key in values)
            await app.run_action("tune('min_p')")
            screen = await wait_for_screen(pilot, app, TuneScreen, 5)
            assert app.focused is screen.query_one("#min_p")
            assert {key: screen.query_one(f"#{key}").value for key in values} == values

    run(body())


def test_keys_typed_fast_after_tab_in_f3_land_in_the_next_field() -> None:
    """A terminal delivers "<tab>4230" in one read; Textual forwarded the digits to the field
    still focused while the tab waited in that field's own queue (min_p became 4230, the
    seed was meant). Tab is a priority binding of the dialog now: the focus moves first."""
    from skippy_tui.ui.screens.tune import TuneScreen

    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f3")
            screen = await wait_for_screen(pilot, app, TuneScreen, 5)
            min_p = screen.query_one("#min_p")
            min_p.focus()
            await pilot.pause()
            before = min_p.value
            seed = screen.query_one("#seed")
            seed.value = ""
            one_read(app, ("tab", None), ("4", "4"), ("2", "2"), ("3", "3"), ("0", "0"))
            await pilot.pause()
            await pilot.pause()
            assert (min_p.value, seed.value) == (before, "4230")
            one_read(app, ("shift+tab", None), ("9", "9"))
            await pilot.pause()
            await pilot.pause()
            assert (min_p.value, seed.value) == ("9", "4230")  # a field focused by tab has its text selected

    run(body())


def test_tune_dialog_checks_bounds() -> None:
    async def body() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f3")
            await wait_for_screen(pilot, app, TuneScreen, 5)
            screen = app.screen
            screen.query_one("#n_draft").value = "0"
            await pilot.press("enter")
            assert app.screen is screen and app.config.get("speculation", "n_draft") == "auto"  # refused
            assert "n_draft" in str(screen.query_one("#tune-error").render())
            screen.query_one("#n_draft").value = "6"
            await pilot.press("tab", "tab", "tab")  # past p_min and the source, to the temperature field
            assert app.focused is screen.query_one("#temperature")
            await pilot.press("backspace", *"0.7", "enter")
            await wait_until(pilot, lambda: not isinstance(app.screen, TuneScreen), 5, "apply")
            assert app.sampling.temperature == 0.7 and app.config.get("speculation", "n_draft") == 6

    run(body())


def test_tune_dialog_sets_seed_sampler_and_penalties() -> None:
    async def body() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f3")
            screen = await wait_for_screen(pilot, app, TuneScreen, 5)
            assert screen.query_one("#seed").value == "random"  # the default: a new seed per reply
            assert "seed: next reply" in str(screen.query_one("#dialog").border_subtitle)
            values = {"temperature": "0.8", "seed": "42", "repeat_penalty": "1.1", "repeat_last_n": "-1"}
            values |= {"presence_penalty": "0.5", "frequency_penalty": "0.25"}
            for key, value in values.items():
                screen.query_one(f"#{key}").value = value
            screen.query_one("#sampler").focus()
            await pilot.press("enter", "down", "enter")  # open the choice, pick the next one
            assert screen.query_one("#sampler").value == "rejection"
            await pilot.click("#apply")
            await wait_until(pilot, lambda: not isinstance(app.screen, TuneScreen), 5, "apply")
            assert app.sampling == SamplingParams(
                temperature=0.8, seed=42, sampler="rejection", repeat_penalty=1.1, repeat_last_n=-1,
                presence_penalty=0.5, frequency_penalty=0.25,
            )  # fmt: skip
            notice = list(app._notifications)[-1].message
            assert "rejection T=0.8" in notice and "Seed 42 from the next reply" in notice
            # reopened, the dialog shows them; "random" (or nothing) goes back to a seed per reply
            await pilot.press("f3")
            screen = await wait_for_screen(pilot, app, TuneScreen, 5)
            assert screen.query_one("#seed").value == "42"
            assert screen.query_one("#sampler").value == "rejection"
            assert screen.query_one("#repeat_last_n").value == "-1"
            screen.query_one("#seed").value = ""
            await pilot.press("enter")
            await wait_until(pilot, lambda: not isinstance(app.screen, TuneScreen), 5, "apply")
            assert app.sampling.seed is None and app.sampling.repeat_penalty == 1.1

    run(body())


def test_tune_dialog_refuses_bad_values_and_changes_nothing() -> None:
    bad = [
        ("seed", "abc", "seed: 'abc' is not \"random\" or a whole number"),
        ("seed", "-1", "seed = -1 is out of bounds"),
        ("temperature", "warm", "temperature: 'warm' is not a number"),
        ("repeat_penalty", "0", "repeat_penalty = 0.0 is out of bounds"),
        ("repeat_last_n", "-2", "repeat_last_n = -2 is out of bounds"),
        ("repeat_last_n", "1.5", "repeat_last_n: '1.5' is not a whole number"),
        ("presence_penalty", "nan", "presence_penalty = nan is out of bounds"),
        ("frequency_penalty", "1e9", "frequency_penalty = 1000000000.0 is out of bounds"),
    ]

    async def body() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        before = app.sampling
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f3")
            screen = await wait_for_screen(pilot, app, TuneScreen, 5)
            async for key, value, message, shown in _enter_each(pilot, app, screen, bad):
                assert message in shown, (key, value)
                assert app.sampling is before
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, TuneScreen), 5, "cancel")
            assert app.sampling is before

    run(body())


def test_palette_reaches_every_tune_field() -> None:
    """Every field has a palette entry, the one action with the field's name: it is run here for a
    choice, a text field and the last field (the top_k test runs one more), and every field is a
    focusable widget of that name in the dialog."""

    async def body() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            from skippy_tui.ui.commands import SkippyCommands

            actions = {action for _, _, action in SkippyCommands(app.screen)._commands()}
            assert {f"tune('{key}')" for key, _ in TUNE_FIELDS} <= actions
            await pilot.press("f3")
            screen = await wait_for_screen(pilot, app, TuneScreen, 5)
            assert all(screen.query_one(f"#{key}").focusable for key, _ in TUNE_FIELDS)
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, TuneScreen), 5, "close")
            for key in ("source", "seed", TUNE_FIELDS[-1][0]):
                await app.run_action(f"tune('{key}')")
                screen = await wait_for_screen(pilot, app, TuneScreen, 5)
                assert app.focused is screen.query_one(f"#{key}"), key
                await pilot.press("escape")
                await wait_until(pilot, lambda: not isinstance(app.screen, TuneScreen), 5, "close")

    run(body())


def test_f3_says_which_settings_the_draft_model_runs_with(speculator) -> None:
    """The default pair's draft is another file: it runs with flash attention "auto", its own
    default, and F3 says so beside the target's (a self-pair would run with the target's)."""

    async def body() -> None:
        app = SkippyApp(ui_config(), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f3")
            screen = await wait_for_screen(pilot, app, TuneScreen, 10)
            said = str(screen.query_one("#tune-draft").render())
            assert said.startswith("draft model runs with its own: flash_attn auto (target off), repack off"), said

    run(body())


def test_f3_offers_mtp_with_the_heads_loaded_and_switches_to_it(tiny_qwen35_mtp_echo: Path, cache_dir: Path) -> None:
    speculator = load(tiny_qwen35_mtp_echo, cache_dir, source="ngram")

    async def body() -> None:
        app = SkippyApp(ui_config(ui={"engine": "thread"}), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            assert "spec on ngram k=4" in status_text(app) and "draft: MTP heads" in status_text(app)
            await pilot.press("f3")
            screen = await wait_for_screen(pilot, app, TuneScreen, 5)
            choice = screen.query_one("#source", Select)
            assert choice.value == "ngram" and not screen.query("#source-note")
            assert [v for _, v in choice._options] == list(DRAFT_SOURCES)  # model sources draft with the heads
            choice.value = "mtp"
            await pilot.click("#apply")
            await wait_until(pilot, lambda: not isinstance(app.screen, TuneScreen), 5, "apply")
            assert speculator.speculation.source == "mtp" and speculator.drafter is speculator.mtp_drafter
            assert "source=mtp" in list(app._notifications)[-1].message
            await wait_until(pilot, lambda: "spec on mtp k=4" in status_text(app), 5, "the status to name mtp")
            assert "rollback: snapshot" in status_text(app)

    try:
        run(body())
    finally:
        speculator.close()


def test_f3_without_heads_offers_no_mtp_and_says_why(tiny_qwen35_echo: Path, cache_dir: Path) -> None:
    speculator = load(tiny_qwen35_echo, cache_dir, source="ngram")

    async def body() -> None:
        app = SkippyApp(ui_config(ui={"engine": "thread"}), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f3")
            screen = await wait_for_screen(pilot, app, TuneScreen, 5)
            assert [v for _, v in screen.query_one("#source", Select)._options] == ["auto", "ngram"]
            note = str(screen.query_one("#source-note").render())
            assert note == "no mtp: the target cannot draft with MTP heads (the file has no MTP (NextN) layers)"

    try:
        run(body())
    finally:
        speculator.close()
