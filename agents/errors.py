"""The root of the errors agents/ raises on purpose.

    AgentsError                every failure of the agents service, its channels and flows
    ├── ModelError             a model call that gave no usable reply (agents.model)
    ├── OutputError            a run's record or checkpoint that could not be written:
    │   │                      the service ends the run, journaled (agents.service)
    │   └── CheckpointTooLarge a conversation too large to checkpoint (agents.stores)
    ├── CatalogError           a catalog that fails validation (agents.catalog; also a
    │                          compiler.LemongraphError, as the CLI's checks catch it)
    └── RegistryError          a handler module that cannot be imported, or a name
                               registered twice (agents.flows.handlers; also a
                               compiler.LemongraphError)

agents/ imports topics/, compiler/ and stream/runtime/ only, so the errors it
raises from those layers keep their own roots. The whole tree of roots is in
docs/operations.md, "Errors".
"""

from __future__ import annotations

__all__ = ["AgentsError", "OutputError"]


class AgentsError(Exception):
    """The root of agents/' errors."""


class OutputError(AgentsError):
    """A run's record or checkpoint that could not be written (the producer
    refused it, or it is over its bound): not the run's fault, so the run does
    not take it as its own error; the agents service ends the run and journals
    why (docs/agents.md, "Output bounds")."""
