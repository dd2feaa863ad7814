"""The engine in a child process: the app's stand-in, the child's side, the wire."""
