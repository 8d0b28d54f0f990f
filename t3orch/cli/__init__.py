"""The ``t3orch`` command line."""
