"""The web page: served by the daemon on its WebSocket port (``t3orch web`` logs a browser in)."""
