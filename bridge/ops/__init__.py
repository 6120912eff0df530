"""Operating the bridge: http.py (the listener of /metrics, /healthz and the API), metrics.py,
logs.py, redact.py (secrets out of all of them) and ctl.py (`hookbridge ctl`, the API's client)."""
