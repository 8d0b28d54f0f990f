"""The embedded default backend: one SQLite file in WAL mode."""
