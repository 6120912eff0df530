"""Cassandra backend (SPEC 5.4)."""
