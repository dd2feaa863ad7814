"""The layout at terminal sizes from 80×24 to 200×50 (issue 12.4, 12.5), on the replay fixture.

The last reply is altered so that it shows what used to be cut: it was stopped
("cancelled" in its footer), and its last step follows a ``truncate 130→130``,
took 17 s to verify, and ended the reply before the target's token
("(reply ended)").
"""

from __future__ import annotations

import dataclasses

import pytest
from textual.widgets._toast import Toast
from ui_helpers import CHAT_JSON, run, settle, ui_config, wait_until

from skippy_tui.engine.events import ReplyFinished, StepVerified, SyncInfo
from skippy_tui.engine.stats import AcceptanceStats
from skippy_tui.transcript import Transcript
from skippy_tui.ui.app import SkippyApp
from skippy_tui.ui.widgets.chat import AssistantMessage
from skippy_tui.ui.widgets.render import SYNC_LEGEND, proposal_cell
from skippy_tui.ui.widgets.timeline import PAD

SIZES = [(80, 24), (90, 25), (100, 30), (120, 40), (150, 42), (200, 50)]


def stopped_reply() -> Transcript:
    """chat.json with its last reply cancelled and its last step as described above."""
    t = Transcript.load(CHAT_JSON)
    events = t.entries[-1].events
    last = max(i for i, e in enumerate(events) if isinstance(e, StepVerified))
    events[last] = dataclasses.replace(
        events[last], sync=SyncInfo("truncate", 130, 130), committed=None, commit_kind="none", verify_ms=16791.0
    )
    fin = next(i for i, e in enumerate(events) if isinstance(e, ReplyFinished))
    events[fin] = dataclasses.replace(events[fin], reason="cancelled")
    return t


def layout_app() -> SkippyApp:
    return SkippyApp(ui_config(), transcript=stopped_reply(), transcript_path=CHAT_JSON, load_models=False)


def _line(widget, y: int) -> str:
    return widget.render_line(y).text


def _inside(app: SkippyApp) -> None:
    """Every shown part of the main screen lies inside the terminal."""
    width, height = app.size
    for w in (app.chat, app.prompt, app.query_one("#status"), app.panel):
        if w.display:
            assert w.region.right <= width and w.region.bottom <= height, (w, w.region, app.size)


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_the_panel_sits_beside_under_or_hides_and_f6_toggles_it(size: tuple[int, int]) -> None:
    width, height = size
    stacked = width < 120
    shown = not stacked or height >= 30

    async def body() -> None:
        app = layout_app()
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            main = app.query_one("#main")
            assert main.has_class("-stacked") == stacked and app.panel.display == shown
            _inside(app)
            if shown and not stacked:
                assert app.panel.region.x >= app.chat.region.right  # beside the chat
            elif shown:
                assert app.panel.region.y >= app.prompt.region.bottom and app.panel.region.width == width
            status = str(app.query_one("#status").render())
            assert ("panel hidden (f6)" in status) == (not shown)
            await pilot.press("f6")
            await wait_until(pilot, lambda: app.panel.display != shown, 5, "F6 to toggle the panel")
            await pilot.pause()
            _inside(app)
            assert ("panel hidden (f6)" in str(app.query_one("#status").render())) == shown
            await pilot.press("f6")
            await wait_until(pilot, lambda: app.panel.display == shown, 5, "F6 to toggle it back")

    run(body())


@pytest.mark.parametrize("size", SIZES[2:], ids=[f"{w}x{h}" for w, h in SIZES[2:]])
def test_step_rows_keep_every_column_in_view(size: tuple[int, int]) -> None:
    """Issue 12.5: once "truncate 130→130" widened the sync column, d/v and "(reply ended)" were cut."""

    async def body() -> None:
        app = layout_app()
        async with app.run_test(size=size) as pilot:
            timeline = app.panel.timeline

            def in_view() -> dict[int, str]:  # the rows in view, under the header, by number
                lines = (_line(timeline, y) for y in range(1, timeline.size.height))
                return {int(t.split()[0]): t for t in lines if t.strip()}

            # the table follows its last row once it is laid out
            await wait_until(pilot, lambda: timeline.row_count == 8 and 7 in in_view(), 5, "the last step in view")
            used = sum(timeline.widths.values()) + 2 * PAD * len(timeline.widths)
            assert used <= timeline.size.width - 1  # the scrollbar's column stays free
            rows = in_view()
            assert max(rows) == 7 and len(rows) == min(8, timeline.size.height - 1)
            assert "(reply ended)" in rows[7] and "17s" in rows[7]
            sync = "t130→130" if timeline.compact else "truncate 130→130"
            assert sync in rows[7]
            legend = app.query_one("#legend")
            assert legend.display == timeline.compact and str(legend.render()) == SYNC_LEGEND
            # every proposal is shown whole, or as much as fits and "…"
            room = timeline.widths["proposal"]
            for i, row in rows.items():
                full = proposal_cell(timeline.steps[i], "", "").plain
                assert (full if len(full) <= room else full[: room - 1] + "…") in row, (row, full, room)

    run(body())


def test_a_stopped_reply_says_so_in_its_footer_at_150_columns() -> None:
    async def body() -> None:
        app = layout_app()
        async with app.run_test(size=(150, 42)) as pilot:
            reply = app.query(AssistantMessage).last()
            await wait_until(pilot, lambda: reply.border_subtitle.startswith("cancelled · 32 tok"), 5, "the footer")
            assert "tok/s" in reply.border_subtitle
            assert "mean accepted length" in reply.tooltip  # the legend of what is abbreviated
            assert len(reply.border_subtitle) <= reply.outer_size.width - 6

    run(body())


def test_toasts_stay_above_the_status_bar() -> None:
    async def body() -> None:
        app = layout_app()
        async with app.run_test(size=(150, 42), notifications=True) as pilot:
            app.notify("Saved somewhere\nand something.md", title="Transcript saved")
            await wait_until(pilot, lambda: bool(app.screen.query(Toast)), 5, "the toast")
            await pilot.pause()
            status = app.query_one("#status")
            for toast in app.screen.query(Toast):
                assert toast.region.bottom <= status.region.y, (toast.region, status.region)

    run(body())


@pytest.mark.parametrize("width", [80, 100, 150, 200])
def test_status_bar_keeps_temperature_speculation_and_speed(speculator, width: int) -> None:
    """Issue 12.4: at 90 columns the bar kept the model names and "CPU" and cut the rest.
    Now names and the backend give way first; tok/s, "spec on" and T=0.8 always stay."""

    async def body() -> None:
        app = SkippyApp(ui_config(sampling={"temperature": 0.8, "seed": 7}), speculator=speculator)
        async with app.run_test(size=(width, 30)) as pilot:
            await pilot.pause()
            status = str(app.query_one("#status").render())
            fields = status.split(" │ ")
            assert len(status) <= width - 2, status
            assert "0.0 tok/s" in fields and "spec on k=auto" in status, status
            assert any(f.startswith("coupled T=0.8") for f in fields), status
            target = speculator.target_info
            if width >= 150:  # room for all: the models, the backend, the context
                assert any(f.startswith("target ") and f.endswith(target.file_type) for f in fields), status
                assert "seed 7" in status and f"ctx 0/{speculator.n_ctx}" in fields
            if width == 80:
                assert not any(f.startswith(("target ", "draft ")) for f in fields), status

    run(body())


def test_f6_is_listed_in_the_footer_and_the_palette() -> None:
    async def body() -> None:
        app = layout_app()
        async with app.run_test(size=(80, 24)) as pilot:
            from skippy_tui.ui.commands import SkippyCommands

            titles = [t for t, _, _ in SkippyCommands(app.screen)._commands()]
            assert "Show/hide the speculation panel  (f6)" in titles
            footer = app.query_one("Footer")
            # first, so it is in view at 80 columns (the footer composes its keys once the focus settles)
            await wait_until(pilot, lambda: [k.key for k in footer.query("FooterKey")][:1] == ["f6"], 5, "f6 first")
            assert footer.query("FooterKey").first().region.right <= 80

    run(body())


def test_resizing_the_terminal_lays_the_screen_out_again() -> None:
    """The app receives only the first resize (later ones go to the screen): the layout must follow
    every one, and F6's choice holds until the layout changes between side by side and stacked."""

    async def body() -> None:
        app = layout_app()
        async with app.run_test(size=(90, 25)) as pilot:
            main, status = app.query_one("#main"), app.query_one("#status")
            await pilot.pause()
            assert main.has_class("-stacked") and not app.panel.display
            await pilot.resize_terminal(150, 42)
            await wait_until(pilot, lambda: not main.has_class("-stacked"), 5, "side by side")
            assert app.panel.display and "draft " in str(status.render())  # room for the names again
            _inside(app)
            await pilot.press("f6")  # hidden by choice...
            await pilot.resize_terminal(140, 40)
            await pilot.pause()
            assert not app.panel.display  # ...while the layout stays side by side
            await pilot.resize_terminal(100, 30)
            await wait_until(pilot, lambda: main.has_class("-stacked"), 5, "stacked")
            assert app.panel.display  # a new layout: shown again, under the chat
            _inside(app)
            await pilot.resize_terminal(100, 24)
            await wait_until(pilot, lambda: not app.panel.display, 5, "hidden when short")
            assert "panel hidden (f6)" in str(status.render())

    run(body())


def test_a_new_chat_shows_the_welcome_text_on_top() -> None:
    """The chat before it was anchored at its end: a new chat's welcome text sat at the bottom."""
    from skippy_tui.ui.widgets.chat import Welcome

    async def body() -> None:
        app = layout_app()
        async with app.run_test(size=(150, 42)) as pilot:
            await settle(pilot)
            assert app.chat.is_anchored
            await pilot.press("ctrl+n")
            await wait_until(pilot, lambda: bool(app.chat.query(Welcome)), 5, "the welcome text")
            await settle(pilot)
            welcome = app.chat.query_one(Welcome)
            assert not app.chat.is_anchored and welcome.region.y == app.chat.content_region.y + 1  # its margin

    run(body())


def test_f6_before_the_first_layout_shows_the_panel() -> None:
    """F6 read with the first frame set a choice the first layout then reset: the panel stayed hidden."""

    async def body() -> None:
        app = layout_app()
        async with app.run_test(size=(80, 24)) as pilot:  # stacked and short: hidden by default
            await settle(pilot)
            app._stacked = app._panel_choice = None  # as before the first layout
            app.action_toggle_panel()
            await settle(pilot)
            assert app.panel.display and app._panel_choice is True

    run(body())


def test_an_opened_chat_shows_its_end_and_keeps_it_when_its_width_changes() -> None:
    """F6 or a resize wraps the replies anew: the chat stayed where it was, above its end."""

    async def body() -> None:
        app = layout_app()
        async with app.run_test(size=(80, 24)) as pilot:
            chat = app.chat
            at_end = lambda: chat.max_scroll_y > 0 and chat.scroll_y == chat.max_scroll_y  # noqa: E731
            await wait_until(pilot, at_end, 5, "the chat at its end")
            before = chat.max_scroll_y
            await pilot.press("f6")  # the panel takes rows: the chat's view shrinks
            await wait_until(pilot, lambda: chat.max_scroll_y != before, 5, "the chat laid out again")
            await settle(pilot)
            assert at_end()
            await pilot.resize_terminal(60, 30)
            await settle(pilot)
            assert at_end()

    run(body())


def test_a_panel_hidden_by_a_resize_hands_its_focus_to_the_input() -> None:
    """With the focus in the panel, a resize that hides it (stacked and short) left nothing
    focused, and every key typed after it went nowhere (a new user's 120x40 -> 60x20)."""

    async def body() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            app.panel.timeline.focus()
            await pilot.pause()
            await pilot.resize_terminal(60, 20)
            await wait_until(pilot, lambda: not app.panel.display, 5, "hidden when short")
            assert app.focused is app.prompt
            app.set_focus(None)  # nothing focused (however it came to be): typing still lands
            await pilot.press("h", "i")
            assert app.focused is app.prompt and app.prompt.text == "hi"

    run(body())


def test_the_timeline_follows_its_last_row_until_scrolled_up() -> None:
    """New rows keep the last one in view, also after the panel was hidden or re-laid out
    (the first rows used to stay in view); scrolled up, the view stays where it was put."""

    async def body() -> None:
        app = layout_app()
        async with app.run_test(size=(100, 30)) as pilot:
            timeline = app.panel.timeline
            more = list(timeline.steps)
            await wait_until(
                pilot, lambda: timeline.max_scroll_y > 0 and timeline.scroll_y == timeline.max_scroll_y, 5, "the end"
            )
            timeline.add_steps(more)
            await wait_until(
                pilot,
                lambda: timeline.scroll_y == timeline.max_scroll_y and timeline.max_scroll_y > 8,
                5,
                "the new end",
            )
            timeline.scroll_home(animate=False, immediate=True)
            await pilot.pause()
            timeline.add_steps(more)
            await pilot.pause(0.2)
            assert timeline.scroll_y == 0 and timeline.row_count == 24
            timeline.scroll_end(animate=False, immediate=True)  # back at the end: following again
            await pilot.pause()
            timeline.add_steps(more)
            await wait_until(
                pilot, lambda: timeline.scroll_y == timeline.max_scroll_y and timeline.row_count == 32, 5, "following"
            )

    run(body())


def test_the_timeline_follows_on_after_its_view_grew_or_its_list_got_shorter() -> None:
    """Issue 57.11: the view moving up by itself (clamped to a taller view, or to a shorter list)
    was taken for the user scrolling up, and the list stopped following: after a taller then a
    shorter panel it stayed rows above the end; after a long reply, the next stayed at the top."""

    async def body() -> None:
        app = layout_app()
        async with app.run_test(size=(100, 30)) as pilot:
            timeline = app.panel.timeline
            steps = list(timeline.steps) * 4

            def at_end() -> bool:
                return timeline.max_scroll_y > 0 and timeline.scroll_y == timeline.max_scroll_y

            app.panel.show_reply("a long reply", steps, AcceptanceStats())
            await wait_until(pilot, at_end, 5, "the end")
            await pilot.resize_terminal(100, 40)  # the panel, under the chat, grows
            await pilot.pause()
            await pilot.resize_terminal(100, 30)
            await wait_until(pilot, at_end, 5, "the end after a taller view and back")
            app.panel.show_reply("the next reply", [], AcceptanceStats())
            await pilot.pause()
            for i in range(0, len(steps), 4):  # streamed in batches, as a reply's steps come
                app.panel.add_steps(steps[i : i + 4], AcceptanceStats())
                await pilot.pause()
            await wait_until(pilot, at_end, 5, "the next reply's last step")

    run(body())


def test_a_timeline_row_is_rendered_once_while_rows_are_added() -> None:
    """New rows render only themselves: the rows already drawn keep their strips (a DataTable
    re-rendered every visible cell on every batch, taking the UI's time from the engine)."""

    async def body() -> None:
        app = layout_app()
        async with app.run_test(size=(150, 42)) as pilot:
            timeline = app.panel.timeline
            await wait_until(pilot, lambda: timeline.row_count == 8, 5, "the reply's steps")
            await pilot.pause()
            # two-digit indices: the index column widens once (which redraws every row), before counting
            timeline.add_steps([dataclasses.replace(st, index=90 + i) for i, st in enumerate(timeline.steps)])
            await pilot.pause()
            rendered: list[int] = []
            cells = timeline._cells
            timeline._cells = lambda st: (rendered.append(st.index), cells(st))[1]  # type: ignore[method-assign]
            steps = timeline.steps[:8]
            more = [dataclasses.replace(st, index=10 + 8 * i + j) for i in range(6) for j, st in enumerate(steps)]
            for i in range(6):  # six batches, following the end
                timeline.add_steps(more[8 * i : 8 * i + 8])
                await pilot.pause()
            assert timeline.scroll_y == timeline.max_scroll_y  # the last row in view
            assert rendered and sorted(rendered) == sorted(set(rendered))  # no row twice
            assert set(rendered) <= {st.index for st in more}  # the rows drawn before were not redrawn
            assert timeline.get_row_at(63)[0].plain == str(more[-1].index)

    run(body())


def test_the_timeline_cursor_moves_by_keys_and_a_click_on_it_inspects() -> None:
    from skippy_tui.ui.screens.inspector import InspectorScreen

    async def body() -> None:
        app = layout_app()
        async with app.run_test(size=(150, 42)) as pilot:
            timeline = app.panel.timeline
            await wait_until(pilot, lambda: timeline.row_count == 8, 5, "the reply's steps")
            timeline.focus()
            await pilot.press("home", "down", "down")
            assert timeline.cursor_row == 2
            await pilot.press("end", "up")
            assert timeline.cursor_row == 6
            cursor = timeline.get_component_rich_style("timeline--cursor")
            assert list(timeline.render_line(1 + 6 - int(timeline.scroll_y)))[1].style.bgcolor == cursor.bgcolor
            await pilot.click(timeline, offset=(3, 1 + 3 - int(timeline.scroll_y)))  # row 3: the cursor moves
            assert timeline.cursor_row == 3 and not isinstance(app.screen, InspectorScreen)
            await pilot.click(timeline, offset=(3, 1 + 3 - int(timeline.scroll_y)))  # again: inspect it
            await wait_until(pilot, lambda: isinstance(app.screen, InspectorScreen), 5, "the inspector")
            assert app.screen.index == 3

    run(body())


def test_a_layout_elsewhere_leaves_the_timeline_unpainted() -> None:
    """Streaming text lays the screen out at every flush; the timeline's scrollbar used to be
    repainted each time (its row count never equals the region size the layout hands a
    ScrollView), which dragged the whole panel into every frame of the chat."""

    async def body() -> None:
        app = layout_app()
        async with app.run_test(size=(150, 42)) as pilot:
            timeline = app.panel.timeline
            more = list(timeline.steps)
            for _ in range(4):
                timeline.add_steps(more)
            await wait_until(pilot, lambda: timeline.max_scroll_y > 0, 5, "a timeline taller than its view")
            await settle(pilot)  # the new rows' own repaint is done
            painted: list[object] = []
            bar = timeline.vertical_scrollbar
            refresh = bar.refresh
            bar.refresh = lambda *a, **k: (painted.append(a), refresh(*a, **k))[1]  # type: ignore[method-assign]
            for _ in range(5):
                app.chat.refresh(layout=True)
                await pilot.pause()
            assert painted == []
            timeline.add_steps(more)  # new rows still move the scrollbar
            await wait_until(pilot, lambda: bool(painted), 5, "the scrollbar to follow new rows")

    run(body())
