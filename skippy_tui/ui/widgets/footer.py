"""The key footer: Textual's, recomposed only when the keys it shows change."""

from __future__ import annotations

from typing import Any

from textual.widgets import Footer


class KeyFooter(Footer):
    """Textual's footer, which remounts all its keys on every bindings update: each focus
    change, and several while the app starts, mostly with the same keys. Each remount mounts
    and styles ~15 widgets, half the app's start-up CPU and most of a Tab's on a small
    machine; this one skips a remount that would show what is already shown."""

    _shown: tuple[Any, ...] | None = None

    def _keys(self) -> tuple[Any, ...]:
        """What ``compose`` reads: the shown bindings (key, text, group, action), whether
        each is enabled and its tooltip, and the footer's own switches."""
        palette = self.app.COMMAND_PALETTE_BINDING
        bindings = tuple(
            (key, binding, enabled, tooltip, self.app.get_key_display(binding))
            for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items()
            if binding.show or key == palette
        )
        return bindings, self.compact, self.show_command_palette

    async def recompose(self) -> None:
        if not self.is_attached:
            return
        keys = self._keys()
        if keys == self._shown:
            return
        self._shown = keys
        await super().recompose()
