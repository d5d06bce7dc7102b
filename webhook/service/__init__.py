"""Process-level wiring: settings, logging, the gunicorn server and what it serves."""
