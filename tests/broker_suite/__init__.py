"""Broker behaviour suite (placeholder docstring, filled in below)."""
