"""skippy-tui: a terminal chat app that does speculative decoding with local GGUF models."""

__version__ = "0.1.0"
