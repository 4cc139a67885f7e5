"""The shell's errors: one root, each carrying what the CLI needs to report it.

    ShellError                 every failure the shell raises on purpose
    ├── ConfigError            a setting that cannot be used (also a ValueError)
    ├── KafkaUnavailable       the broker cannot be reached, or answered with an error
    ├── BrokerStartError       the embedded broker did not start
    ├── TopicError             a topic is missing, or has the wrong partition count
    ├── ProduceError           the broker refused (or never acknowledged) a record batch
    ├── StorageError           the job table could not be read (the disk, not a record)
    ├── StaleBuild             a compiled module no longer matches its source
    ├── GatewayStartError      the gateway's servers did not start
    ├── BenchError             a benchmark run could not measure what it set out to
    └── StopWorker             a worker must stop: not one record's fault (exit code)

The CLI turns a ShellError into its message and its ``exit_code`` (an
:class:`ExitCode`: ``FAILED`` unless the class says otherwise) and never catches
broader errors than this root. Every error class of stream/ hangs under it (the
schedule operations' ``Invalid``, the engine's ``TooLarge``, ``flow run``'s
``BadInput``) except the gateway's HTTP refusals, whose root is
``stream.gateway.errors.ApiError``. The other layers' roots are
``topics.ContractError``, ``compiler.LemongraphError`` and
``agents.errors.AgentsError`` (docs/operations.md, "Errors").
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "BenchError",
    "BrokerStartError",
    "ConfigError",
    "ExitCode",
    "GatewayStartError",
    "KafkaUnavailable",
    "ProduceError",
    "ShellError",
    "StaleBuild",
    "StopWorker",
    "StorageError",
    "TopicError",
]


class ExitCode(IntEnum):
    """What every ``lemongraph`` process and command exits with (docs/operations.md,
    "Exit codes"): one number for one reason, whichever process says it."""

    OK = 0
    #: A problem found, a refusal, a failure the shell expected (a ShellError).
    FAILED = 1
    #: Bad input: a usage error (as click's own), unusable files or recordings.
    USAGE = 2
    #: ``start-job`` and ``send-event``: no decision within ``--timeout``.
    NO_DECISION = 3
    #: A worker's batch failed for a reason that is not one record's.
    BATCH_FAILED = 70
    #: The agents service's disk refused writes for longer than it can keep them
    #: in memory (EX_IOERR).
    DISK = 74
    #: A worker's clean stop did not finish in time after SIGTERM or SIGINT.
    STOP_TIMEOUT = 75
    #: An inbox log was reset under a worker's state.
    LOG_RESET = 78


class ShellError(Exception):
    """The root of the shell's errors. ``exit_code`` is what the process exits
    with when the CLI reports it."""

    exit_code: int = ExitCode.FAILED

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(ShellError, ValueError):
    """A setting with a value that cannot be used; names the variable."""


class KafkaUnavailable(ShellError, RuntimeError):
    """The broker could not be reached or answered with an error."""


class BrokerStartError(ShellError, RuntimeError):
    """The embedded broker did not start."""


class TopicError(ShellError, ValueError):
    """A topic that is missing, could not be created, or has the wrong partition
    count (co-partitioning needs the same count on inbox and ticks)."""


class ProduceError(ShellError, RuntimeError):
    """The broker refused (or never acknowledged) a record batch."""


class StorageError(ShellError, RuntimeError):
    """The job table could not be read: a failure of the disk, not of a record.
    It stops the worker (nothing of the batch is committed) instead of
    dead-lettering the record being decided."""


class StaleBuild(ShellError, RuntimeError):
    """A compiled module no longer matches its source."""


class GatewayStartError(ShellError, RuntimeError):
    """The gateway's servers did not start (a port taken, a bad setting)."""


class BenchError(ShellError, RuntimeError):
    """A benchmark part could not measure what it set out to (say why)."""


class StopWorker(ShellError):
    """Raised by a batch handler for a failure that is not about one record (the
    broker's, the disk's): the worker stops with ``exit_code`` and this message,
    and nothing of the batch is acknowledged."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message, exit_code=code)

    @property
    def code(self) -> int:
        """The exit code (``exit_code``)."""
        return self.exit_code
