"""A ``.env`` file as the settings read it (README, "Configuration"):
its own module, so that the settings (stream.runtime.config) and the Kafka
clients (stream.runtime.kafka) both read it without importing each other."""

from __future__ import annotations

from pathlib import Path

from stream.runtime.errors import ConfigError

__all__ = ["read_dotenv"]


def read_dotenv(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines; ``#`` comments, ``export`` prefixes and quotes allowed."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        if "=" not in line:
            raise ConfigError(f"{path}:{number}: expected KEY=VALUE, got {raw!r}")
        key, value = (part.strip() for part in line.split("=", 1))
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key] = value
    return values
