"""The root of the errors topics/ raises: a value that breaks the contract.

    ContractError              a value no producer may write, or no consumer can read
    ├── RecordError            a record that cannot be decoded or validated (topics._codec)
    ├── LimitError             a value beyond the limits: size, depth, integers (topics._limits)
    ├── JobKeyError            a job key that breaks the key rule (topics._keys)
    ├── ReplyTokenError        a reply or bounce address that cannot be trusted (topics.replies)
    └── SenderNotContact       a reply not from the contact it was issued to (topics.mail)

Each is also a ``ValueError``, as it always was, so code that catches
``ValueError`` still catches it. The other layers' roots (docs/operations.md,
"Errors"): ``compiler.LemongraphError``, ``stream.runtime.errors.ShellError``,
``stream.gateway.errors.ApiError``, ``agents.errors.AgentsError``.
"""

from __future__ import annotations

__all__ = ["ContractError"]


class ContractError(ValueError):
    """The root of topics/' errors: a value that breaks the contract between
    producers and consumers (docs/kafka.md)."""
