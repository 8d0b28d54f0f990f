"""The durable event log: a small contract (``interface``), one SQLite backend, one writer."""
