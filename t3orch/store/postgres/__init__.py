"""The PostgreSQL store backend (issue 19): several daemons, one log."""
