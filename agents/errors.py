"""The root of the errors agents/ raises on purpose.

    AgentsError                every failure of the agents service, its channels and flows
    ├── ModelError             a model call that gave no usable reply (agents.model)
    ├── CheckpointTooLarge     a conversation too large to checkpoint (agents.stores)
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

__all__ = ["AgentsError"]


class AgentsError(Exception):
    """The root of agents/' errors."""
