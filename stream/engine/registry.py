"""The playbook registry a worker decides with: every version it knows, by key."""

from __future__ import annotations

from collections.abc import Iterable

from compiler import JobGraph, Playbook, compile_playbook

__all__ = ["Registry"]


class Registry:
    """Playbooks by (key, version), and a JobGraph for each, built once.

    New jobs start on the highest version of a key; a running job keeps the
    version it pinned, so old versions are never forgotten while the worker runs.
    """

    def __init__(self, playbooks: Iterable[Playbook] = ()) -> None:
        self._graphs: dict[tuple[str, int], JobGraph] = {}
        self._latest: dict[str, int] = {}
        for playbook in playbooks:
            self.add(playbook)

    def add(self, playbook: Playbook) -> bool:
        """Register a version; False when that exact version was known already."""
        ident = (playbook.key, playbook.version)
        known = self._graphs.get(ident)
        if known is not None and known.playbook.to_json() == playbook.to_json():
            return False
        self._graphs[ident] = JobGraph(playbook)
        if playbook.version >= self._latest.get(playbook.key, 0):
            self._latest[playbook.key] = playbook.version
        return True

    def add_spec(self, spec: dict[str, object], source: str) -> Playbook:
        """Compile and register a spec (from the playbooks topic)."""
        playbook = compile_playbook(spec, source)
        self.add(playbook)
        return playbook

    def latest(self, key: str) -> JobGraph | None:
        """The graph for new jobs on ``key``."""
        version = self._latest.get(key)
        return None if version is None else self._graphs[(key, version)]

    def graph(self, key: str, version: int) -> JobGraph | None:
        """The graph for jobs pinned to ``key`` v``version``."""
        return self._graphs.get((key, version))

    def playbooks(self) -> list[Playbook]:
        """Every registered version, sorted by key and version."""
        return [self._graphs[k].playbook for k in sorted(self._graphs)]

    def __len__(self) -> int:
        return len(self._graphs)
