"""Running Canopy for a team: health, metrics, logs, throttles, callbacks.

Each module here is one operational concern; `research/urls.py` mounts the endpoints."""
