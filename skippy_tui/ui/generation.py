"""The generation flow: send, the worker, engine events into the widgets, finish, stop.

A thread worker runs :meth:`Speculator.run` and posts every event as an
:class:`EngineEvent` message (the worker never touches a widget). Steps queue up
in ``_pending`` and a 20 Hz timer applies them in one batch (Markdown stream,
stats), so a fast backend never floods the UI; text is never dropped. Timeline
rows and the status line follow at 4 Hz, in batches (each new row is rendered
once: ui/widgets/timeline.py). Textual repaints the bounding box of a frame's changes:
a status update at every flush made each frame of text span the screen's width.
``ReplyFinished`` flushes both queues first, then ends the reply. Esc sets the
reply's cancel event (the engine checks it between steps).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Protocol

from textual import work
from textual.worker import Worker

from ..engine.events import ReplyFinished, ReplyStarted, StepVerified
from ..engine.sampling.params import SamplingParams
from ..engine.settings import GenerationSettings
from ..engine.stats import AcceptanceStats
from ..transcript import Entry, model_pair, models_label, reply_stats
from .context_fit import count_label, cut_short, engine_refusal, refusal
from .messages import EngineEvent
from .widgets.chat import AssistantMessage, MessageWidget, SystemNote, UserMessage, Welcome
from .widgets.prompt import HINT


class SamplingHost(Protocol):
    """Where the live sampling settings are read (the app; F3 replaces them)."""

    sampling: SamplingParams


FLUSH_HZ = 20
PANEL_HZ = 4


class LiveGeneration:
    """:class:`GenerationSettings` whose sampling is read afresh at every step.

    The engine reads ``gen.sampling`` each time it verifies a step, so handing it
    this object makes a sampling change (F3) apply from the next step, as
    ``Speculator.update`` does for n_draft and p_min. The seed is the one the
    reply started with: a new seed applies from the next reply, so setting it
    mid-reply is no change for this one (the engine would record it as one).
    Length and stop strings stay fixed for the reply.
    """

    def __init__(self, base: GenerationSettings, app: SamplingHost) -> None:
        self.max_tokens = base.max_tokens
        self.stop = base.stop
        self._app = app
        self._seed = app.sampling.seed
        self._seen = self._pinned = app.sampling

    @property
    def sampling(self) -> SamplingParams:
        live = self._app.sampling
        if live is not self._seen:  # changed by F3: build the pinned copy once per change
            pinned = live if live.seed == self._seed else dataclasses.replace(live, seed=self._seed)
            self._seen, self._pinned = live, pinned
        return self._pinned


class GenerationMixin:
    """Sending a message, running the reply in a worker, and showing its events as they come.

    Owns the reply in flight: ``generating``, ``_reply_id`` (events of an older reply are
    dropped), ``_cancel``, ``_current`` / ``_current_entry`` / ``_reply_at`` (its widget,
    its transcript entry and where that goes), ``_live_stats``, the ``_pending`` /
    ``_panel_pending`` step queues, ``_forget_next`` (a new chat: the engine's caches start
    empty), ``_editing`` (Ctrl+L) and ``_sent`` (the message just sent, taken back if the
    engine refuses it). Relies on the app's ``speculator``, ``transcript``, ``generation``,
    ``chat``, ``panel``, ``prompt``, ``state``, ``_size_now`` / ``_note_context`` /
    ``_prompt_changed`` (ContextFitMixin), ``_shown``, ``_show_in_panel`` and
    ``_place_system_notes`` (ReplyViewMixin), ``_update_status`` (StatusMixin),
    ``action_save`` / ``_save_history`` (FilesMixin), ``_swap_models`` (LoadingMixin), and
    the app's ``_relay``, ``_flush_timer`` and ``_quitting`` /
    ``_go_on_quitting`` (a quit mid-reply goes on once the reply has ended).
    """

    def _init_generation(self) -> None:
        self.generating = False
        self._reply_id = 0
        self._cancel = threading.Event()
        self._current: AssistantMessage | None = None
        self._current_entry: Entry | None = None
        self._live_stats = AcceptanceStats()
        self._pending: list[StepVerified] = []
        self._panel_pending: list[StepVerified] = []
        self._panel_at = 0.0  # time.monotonic() of the last timeline update
        self._forget_next = False
        self._editing: int | None = None  # entry index of the user message being edited
        self._reply_at = 0  # where the reply in flight goes in the transcript
        self._sent: Entry | None = None  # the user message the reply in flight answers, if just sent

    async def _send(self, text: str) -> None:
        """Send a message typed in the input (Enter): it starts a reply, or a notice says why not."""
        text = text.strip()
        if not text:
            return
        if self.generating:
            self.notify("A reply is still being generated: wait, or press Esc to stop it.", severity="warning")
            return
        if self.speculator is None:
            hint = "they are still loading" if self.loading else "press F5 to load them"
            self.notify(f"No models loaded: {hint}.", severity="warning")
            return
        size = self._size_now(text)
        if size is not None and not size.fits:  # refused before anything changes: the text stays
            self.prompt.set_count(count_label(size), too_long=True)
            await self._note_context(refusal(size))
            self.notify("The message does not fit the context window: see the note in the chat.", severity="warning")
            return
        self.prompt.remember(text)
        self.state.history = self.prompt.recall_list
        self.state.save()
        self.prompt.clear()
        for w in self.chat.query(Welcome):
            await w.remove()
        entry = Entry("user", text)
        if self._editing is not None:  # it replaces the message edited, and all after it
            await self._resend_from(self._editing, entry)
            self._end_edit()
        else:
            self.transcript.entries.append(entry)
            await self.chat.mount(UserMessage(entry))
        await self._start_reply(sent=entry)

    async def _start_reply(self, sent: Entry | None = None) -> None:
        """Start the reply to the transcript; ``sent``: the user message just sent (Enter), which
        goes back into the input if the engine refuses it (the chat with it overflows the window)."""
        self._sent = sent
        messages = self.transcript.engine_messages()
        self._reply_at = len(self.transcript.entries)  # F2 mid-reply adds its change after the reply
        entry = Entry("assistant", "", models=self._model_pair())
        before = next((e.models for e in reversed(self.transcript.entries) if e.models is not None), None)
        if before is not None and models_label(before) != models_label(entry.models):  # switched since (F8)
            await self.chat.mount(SystemNote(f"models: {models_label(entry.models)}", markup=False))
        msg = AssistantMessage(entry)
        await self.chat.mount(msg)
        self.chat.anchor()
        self.chat.scroll_end(animate=False)
        msg.start_stream()
        self._current, self._current_entry = msg, entry
        self._live_stats = AcceptanceStats()
        self._pending, self._panel_pending = [], []
        self._cancel = threading.Event()
        self._reply_id += 1
        self.generating = True
        self._flush_timer.resume()
        replies = list(self.chat.query(AssistantMessage))
        for r in replies:
            r.set_class(r is msg, "-shown")
        self._shown = msg
        self.panel.show_reply(f"reply {len(replies)} of {len(replies)} · generating…", [], self._live_stats)
        self.refresh_bindings()
        forget, self._forget_next = self._forget_next, False
        self._generate(self._reply_id, messages, LiveGeneration(self.generation, self), self._cancel, forget)
        self._update_status()

    @work(thread=True, exclusive=True, exit_on_error=False, group="generate", name="generate")
    def _generate(
        self, reply_id: int, messages: list[dict[str, str]], gen: Any, cancel: threading.Event, forget: bool
    ) -> None:
        spec = self.speculator
        if forget:
            spec.forget()
        relay = self._relay if getattr(spec, "separate_process", False) else None
        if relay is None:  # the engine runs in this thread (or the UI does not yield the CPU)
            self._relay_events(spec, reply_id, messages, gen, cancel)
        else:  # an engine process: its events pass through a thread at the UI's priority
            relay.submit(self._relay_events, spec, reply_id, messages, gen, cancel).result()

    def _relay_events(
        self, spec: Any, reply_id: int, messages: list[dict[str, str]], gen: Any, cancel: threading.Event
    ) -> None:
        for ev in spec.run(messages, gen, cancel):
            self.post_message(EngineEvent(reply_id, ev))

    async def on_engine_event(self, msg: EngineEvent) -> None:
        if msg.reply_id != self._reply_id or self._current_entry is None:
            return
        ev = msg.event
        if isinstance(ev, StepVerified):
            self._pending.append(ev)
        elif isinstance(ev, ReplyStarted):
            self._current_entry.events.append(ev)
            self._n_ctx = ev.n_ctx
            self._n_past = ev.n_prompt
            self.panel.set_title(
                f"reply {len(self.chat.query(AssistantMessage))} · prompt {ev.n_prompt} tok · "
                f"target {ev.target_sync.label()} · prefill {ev.prefill_ms:.0f} ms"
                + (f" · draft {ev.draft_sync.label()}" if ev.draft_sync.kind != "none" else "")
            )
            self._update_status()
        elif isinstance(ev, ReplyFinished):
            await self._flush_steps(final=True)
            await self._finish_reply(ev)

    async def _flush_steps(self, final: bool = False) -> None:
        """Apply queued steps in one batch (20 Hz timer, and before a reply ends)."""
        if self._current is None or self._current_entry is None:
            return
        if self._pending:
            steps, self._pending = self._pending, []
            self._current_entry.events.extend(steps)
            for st in steps:
                self._live_stats.add_step(
                    len(st.proposed), st.n_accepted, st.n_committed,
                    step_ms=st.sync_ms + st.draft_ms + st.verify_ms,
                )  # fmt: skip
            self._n_past = steps[-1].n_past_after
            await self._current.append([s for st in steps for s in st.delta])
            self._panel_pending += steps
        if self._panel_pending and (final or time.monotonic() - self._panel_at >= 1 / PANEL_HZ):
            steps, self._panel_pending = self._panel_pending, []
            self._panel_at = time.monotonic()
            self._update_status()
            if self._shown is self._current:
                self.panel.add_steps(steps, self._live_stats)

    async def _finish_reply(self, fin: ReplyFinished) -> None:
        msg, entry = self._current, self._current_entry
        assert msg is not None and entry is not None
        entry.events.append(fin)
        entry.content = fin.text
        self._n_past = fin.n_past
        await msg.finish(fin, fin.text)
        self.generating = False
        self._flush_timer.pause()
        self._current = self._current_entry = None
        refused = fin.reason == "context_full" and fin.n_tokens == 0  # the prompt alone overflowed
        if refused:
            await msg.remove()
            await self._unsend()
            await self._note_context(engine_refusal(fin.error))
        elif fin.text or fin.reason not in ("error", "cancelled"):
            self.transcript.entries.insert(self._reply_at, entry)
            stats = reply_stats(entry.events)
            self.session_stats.merge(stats)
            self.panel.set_session(self.session_stats)
            if self._shown is msg:
                self._show_in_panel(msg)
        else:
            await msg.remove()
        if fin.reason == "error":
            from ..engine.native.rpc import speculator_lost

            lost = speculator_lost(self.speculator)
            if lost:  # its engine process exited or its RPC server is gone: F5 loads again; the chat stays
                self._drop_lost_speculator()
            self.notify(
                (fin.error or "generation failed") + (". Press F5 to load the models again." if lost else ""),
                title="Generation failed", severity="error", timeout=10,
            )  # fmt: skip
        elif fin.reason == "cancelled":
            self.notify("Stopped.", timeout=2)
        elif fin.reason == "context_full" and not refused:  # the reason stays in the chat, not only in a toast
            await self._note_context(cut_short(fin.n_past, self._n_ctx or self.speculator.n_ctx))
        if fin.reason == "context_full":
            self.notify("The context window is full: see the note in the chat.", severity="warning")
        self.refresh_bindings()
        self._update_status()
        self._prompt_changed()  # the chat changed: the input's count too
        if self.config.get("ui", "autosave") and entry in self.transcript.entries:
            self.action_save(quiet=True)
        self._save_history()
        if self._quitting:  # the reply stopped for a quit: the chat, with it, is kept; go on
            await self._go_on_quitting()
            return
        if self._switched is not None:  # models chosen in the picker loaded during this reply
            self._swap_models()

    def _model_pair(self) -> dict[str, Any] | None:
        """The loaded target and draft, as a reply records them."""
        spec = self.speculator
        if spec is None or spec.target_info is None:
            return None
        return model_pair(spec.target_info.summary(), spec.draft_info.summary() if spec.draft_info else None)

    async def _unsend(self) -> None:
        """Take back the message the engine refused: out of the transcript and the chat, its
        text into the input (unless something else was typed since: ↑ recalls it), so that the next
        message does not carry it too."""
        sent, self._sent = self._sent, None
        if sent is None or not self.transcript.entries or self.transcript.entries[-1] is not sent:
            return
        await self._cut(len(self.transcript.entries) - 1)
        await self._place_system_notes()
        if not self.prompt.text.strip():
            self.prompt.load_text(sent.content)
            self.prompt.move_cursor(self.prompt.document.end)

    def _drop_lost_speculator(self) -> None:
        """Unload a speculator that can no longer answer. An engine process is ended; an
        in-process one is left alone (closing it could block on a lost RPC server)."""
        lost, self.speculator = self.speculator, None
        if lost is not None and self.owns_speculator and getattr(lost, "separate_process", False):
            # off the UI thread: a child stuck on a lost RPC server is killed only after a grace time
            threading.Thread(target=lost.close, name="skippy-close-engine", daemon=True).start()
        self.owns_speculator = False

    async def _generate_failed(self, worker: Worker) -> None:
        """The generate worker raised (an unexpected exception in the engine thread;
        SkippyErrors arrive as ReplyFinished): end the reply with the error shown."""
        if not self.generating:
            return
        error = worker.error
        await self._flush_steps(final=True)
        self.generating = False
        self._flush_timer.pause()
        if self._current is not None:
            await self._current.fail(error)
        self._current = self._current_entry = None
        self.notify(f"{type(error).__name__}: {error}", title="Generation failed", severity="error")
        self.refresh_bindings()
        if self._quitting:
            await self._go_on_quitting()

    # -- stop, regenerate, edit ----------------------------------------------------------------

    def action_stop(self) -> None:
        if self.screen.query("HelpPanel"):  # the keys panel (palette: Keys) closes first, as dialogs do
            self.action_hide_help_panel()
        elif self.generating:
            self._stop_reply()
        elif self._editing is not None:
            self._end_edit()
            self.prompt.clear()

    def _stop_reply(self) -> None:
        """Cancel the reply in flight; an engine process hears it at once (see
        ``ProcessSpeculator.cancel_reply``), not when the relay next reads an event."""
        self._cancel.set()
        cancel_now = getattr(self.speculator, "cancel_reply", None)
        if cancel_now is not None:
            cancel_now()

    def _busy(self) -> bool:
        if self.generating:
            self.notify("Stop the reply first (Esc).", severity="warning")
            return True
        return False

    async def _cut(self, index: int, keep: Entry | None = None) -> None:
        """Entries ``index..`` out of the transcript (:meth:`Transcript.cut`) and their widgets
        out of the chat, but ``keep``'s (a regenerate sends the same message again)."""
        dropped = {id(e) for e in self.transcript.cut(index)}
        for w in list(self.chat.query(MessageWidget)):
            if w.entry is not keep and id(w.entry) in dropped:
                await w.remove()

    async def _resend_from(self, index: int, user: Entry) -> None:
        """Send ``user`` in place of entries ``index..`` (an edit, or a regenerate sending the
        same message again): they and their widgets go, and a system prompt set after them
        stays, now before ``user``, which it applies to."""
        await self._cut(index, keep=user)
        self.transcript.entries.append(user)
        if not any(w.entry is user for w in self.chat.query(UserMessage)):
            await self.chat.mount(UserMessage(user))
        await self._place_system_notes()

    async def action_regenerate(self) -> None:
        if self._busy():
            return
        if self.speculator is None:
            self.notify("No models loaded: press F5 to load them.", severity="warning")
            return
        entries = self.transcript.entries
        ask = self._last_user_index()  # the message the last reply answers
        if ask is None:
            self.notify("Nothing to regenerate yet.")
            return
        await self._resend_from(ask, entries[ask])
        await self._start_reply()

    def _last_user_index(self) -> int | None:
        entries = self.transcript.entries
        return next((i for i in range(len(entries) - 1, -1, -1) if entries[i].role == "user"), None)

    def action_edit_last(self) -> None:
        if self._busy():
            return
        idx = self._last_user_index()
        if idx is None:
            self.notify("No message to edit yet.")
            return
        self._editing = idx
        prompt = self.prompt
        prompt.load_text(self.transcript.entries[idx].content)
        prompt.move_cursor(prompt.document.end)
        prompt.border_title = "editing your last message"
        prompt.set_hint("enter resends (the reply after it is replaced) · esc cancels")
        prompt.add_class("-editing")
        prompt.focus()

    def _end_edit(self) -> None:
        self._editing = None
        prompt = self.prompt
        prompt.border_title = "message"
        prompt.set_hint(HINT)
        prompt.remove_class("-editing")
        self._prompt_changed()  # counted against the whole chat again
