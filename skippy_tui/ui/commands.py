"""Command palette entries for every app action, with the key that also runs it.

The provider needs two things from the app — whether an action applies now and
which key runs it — and asks for them through :class:`CommandHost`, so this
module never imports the app (which imports it to register the provider).
"""

from __future__ import annotations

from functools import partial
from typing import Protocol

from textual.command import DiscoveryHit, Hit, Hits, Provider


class CommandHost(Protocol):
    """What the palette asks of the app (``SkippyApp`` provides both)."""

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """False when ``action`` does not apply right now (it is then left out)."""
        ...

    def key_for(self, action: str) -> str:
        """The key shown beside the command, e.g. ``^r``; empty when it has none."""
        ...


# (title, help, action); the key is looked up from the app's bindings.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("Stop generation", "Stop the reply within one step", "stop"),
    ("New chat", "Clear the conversation and the KV caches", "new_chat"),
    ("Regenerate last reply", "Generate the last reply again", "regenerate"),
    ("Edit last message", "Put your last message back in the input; Enter resends it", "edit_last"),
    ("Set system prompt", "Change the system prompt (from the next reply)", "system_prompt"),
    ("Toggle speculation", "Speculative decoding on/off (from the next step)", "toggle_speculation"),
    ("Set n_draft", "Tokens per proposal, k (from the next step)", "tune('n_draft')"),
    ("Set p_min", "Stop drafting below this draft probability (from the next step)", "tune('p_min')"),
    ("Set source", "What proposes: draft model, n-gram, MTP heads or auto (from the next step)", "tune('source')"),
    ("Set temperature", "Sampling temperature, 0 = greedy (from the next step)", "tune('temperature')"),
    ("Set sampler", "Coupled (= plain sampling's reply) or rejection (from the next step)", "tune('sampler')"),
    ("Set top_k", "Keep the k most likely tokens, 0 = off (from the next step)", "tune('top_k')"),
    ("Set top_p", "Nucleus filter, 1 = off (from the next step)", "tune('top_p')"),
    ("Set min_p", "Drop tokens far below the top one, 0 = off (from the next step)", "tune('min_p')"),
    ("Set seed", "Random per reply, or a fixed number to reproduce (from the next reply)", "tune('seed')"),
    ("Set max_tokens", "Reply length cap in tokens (from the next reply)", "tune('max_tokens')"),
    ("Set repeat penalty", "Penalise recently seen tokens, 1 = off (from the next step)", "tune('repeat_penalty')"),
    ("Set repeat_last_n", "Penalty window in tokens: 0 = off, -1 = all (from the next step)", "tune('repeat_last_n')"),
    ("Set presence penalty", "Lower every seen token, 0 = off (from the next step)", "tune('presence_penalty')"),
    ("Set frequency penalty", "Lower tokens by times seen, 0 = off (from the next step)", "tune('frequency_penalty')"),
    (
        "Save settings as defaults",
        "Open with F3's settings, the system prompt and the models (F8) from now on",
        "save_defaults",
    ),
    ("Show previous reply", "Show the previous reply's steps in the panel", "show_reply(-1)"),
    ("Show next reply", "Show the next reply's steps in the panel", "show_reply(1)"),
    ("Copy reply", "Copy the reply the panel shows to the clipboard", "copy_reply"),
    ("Copy code block", "Copy a code block of the reply the panel shows to the clipboard", "copy_code"),
    ("Help", "Keys, the panel's columns and badges, the status bar, colours, models", "help"),
    ("Toggle origin colouring", "Colour reply text by draft (accepted) vs target tokens", "toggle_origin"),
    ("Show/hide the speculation panel", "At any size; narrow terminals put it under the chat", "toggle_panel"),
    ("Save transcript", "Write the conversation as Markdown + JSON", "save"),
    ("Open transcript", "Load a saved conversation (continue it when models are loaded)", "open_transcript"),
    ("Chat history", "Every chat, saved after each reply: filter, open to continue, rename, delete", "history"),
    ("Load models", "Load the configured models to continue this conversation", "load_models"),
    ("Choose models…", "Pick a target and its draft from the model library; the conversation stays", "choose_models"),
    ("Switch theme", "Pick a theme (remembered)", "change_theme"),
    ("Quit", "Quit now (stops a reply in flight)", "quit"),
)


class SkippyCommands(Provider):
    """The app's own actions (only those that apply right now)."""

    def _commands(self) -> list[tuple[str, str, str]]:
        app: CommandHost = self.app  # type: ignore[assignment]
        out = []
        for title, help_text, action in COMMANDS:
            name = action.split("(")[0]
            if app.check_action(name, ()) is False:
                continue
            key = app.key_for(action)
            out.append((f"{title}  ({key})" if key else title, help_text, action))
        return out

    async def discover(self) -> Hits:
        for title, help_text, action in self._commands():
            yield DiscoveryHit(title, partial(self.app.run_action, action), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, action in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), partial(self.app.run_action, action), help=help_text)
