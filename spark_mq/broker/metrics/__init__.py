"""Prometheus metrics of a broker (see docs/operations.md for every name and when to alert)."""
