"""The Textual front end: :mod:`app` (the chat app), :mod:`launch` (entry points from the CLI).

Only this package imports Textual and Rich; the engine stays a plain library.
"""
