"""Scenarios on a virtual clock, run through the pure core (docs/playbooks.md)."""
