"""The app's widgets and their formatting."""
