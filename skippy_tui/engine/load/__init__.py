"""From settings and GGUF headers to a ready speculator: facts, checks, loading."""
