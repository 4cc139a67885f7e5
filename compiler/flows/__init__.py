"""Flows: definitions, their step function, schemas, readable values (docs/flows.md)."""
