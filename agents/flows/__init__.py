"""Flows in the agents service: loading, running and guarding them (docs/flows.md)."""
