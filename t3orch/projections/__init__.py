"""Projections: rows derived from the log, and the read models built on them."""
