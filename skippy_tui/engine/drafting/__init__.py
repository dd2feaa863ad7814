"""Draft sources (draft model, n-gram, combined, MTP heads) and the KV caches they sync."""
