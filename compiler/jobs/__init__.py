"""Playbooks and the decision core: JobGraph, job state, inputs and effects (docs/decisions.md)."""
