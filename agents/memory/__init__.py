"""Grounded memory in the agents service (docs/memory.md, "Given to agents"):
the read model of the ``memory`` topic (:mod:`agents.memory.profiles`) and what
a run is told of its subject (:mod:`agents.memory.recall`, pure), and a job's
rolling summary of its conversation (:mod:`agents.memory.summary`, imported by
name: it builds on agents/compose.py, which builds on this package)."""

from __future__ import annotations

from agents.memory.profiles import Profiles, fact_dicts
from agents.memory.recall import MEMORY_TOKENS, estimate_tokens, known_lines, ranked

__all__ = ["MEMORY_TOKENS", "Profiles", "estimate_tokens", "fact_dicts", "known_lines", "ranked"]
