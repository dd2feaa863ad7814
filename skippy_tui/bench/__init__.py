"""``skippy-tui bench`` and the draft finder's measuring run."""
