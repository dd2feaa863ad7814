"""The app's dialogs, one per module."""
