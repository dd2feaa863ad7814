"""Typed errors raised by the engine.

Every error a user can cause (a wrong path, a corrupt or mismatched GGUF file, a
bad setting, a full context window) is a :class:`SkippyError`, whose ``str`` is a
single line fit to show as-is. Front ends catch ``SkippyError`` and never show a
traceback for it.
"""

from __future__ import annotations


class SkippyError(Exception):
    """Base class of every error the engine raises on purpose."""


class ModelFileError(SkippyError):
    """A model file is missing, unreadable, not GGUF, or fails to load."""


class IncompatibleModelsError(SkippyError):
    """Target and draft cannot be paired (vocabularies or special ids differ)."""


class BoundsError(SkippyError, ValueError):
    """A setting is outside its bound; names the key, the value and the bound.

    Attributes:
        key: the setting's name, e.g. ``"n_draft"``.
        value: the rejected value.
        bound: human-readable bound, e.g. ``"1..4096"``.
    """

    def __init__(self, key: str, value: object, bound: str) -> None:
        self.key = key
        self.value = value
        self.bound = bound
        super().__init__(f"{key} = {value!r} is out of bounds: must be {bound}")


class ContextFullError(SkippyError):
    """The prompt alone does not fit the context window."""


class DecodeError(SkippyError):
    """llama.cpp refused or failed a decode; the KV bookkeeping is unchanged."""


class CancelledError(SkippyError):
    """Work was cancelled by the caller (used only where no event can carry it)."""


class StateError(SkippyError):
    """A sequence state could not be saved or restored (too large, or refused by llama.cpp)."""
