"""Edit without restart, the agents service's side (docs/operations.md,
"Reloading"): a changed catalog, a new flow or a playbook that names one is
picked up from the playbooks folder while the service runs.

:class:`CatalogReload` polls the folder (and the catalog file, which
``LEMONGRAPH_CATALOG`` may put elsewhere) about once a second. When a file
changed, it checks first: the catalog is loaded and validated as at start,
the flows are compiled against it; then the service runs every later run with
the new catalog (its agents, tools and instructions), and the milestones of new
flows are run by them. What it refuses, it says, and the service goes on with
what it had:

* a catalog that does not load (its first problem is said);
* a changed flow that the service runs already: a run of it in progress was
  started, and is journaled, by the old definition, so a changed flow needs a
  new name (``flows/NAME-2.yaml`` and the milestone's ``flow:``) or a restart;
* changed MCP servers: the servers were started with the service; the new ones
  start at the next start.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from compiler import LemongraphError
from stream.runtime.files import FolderWatch, is_scenario, is_schedules

from agents.catalog import Catalog, CatalogError, load_catalog_file
from agents.flows.loading import Flows, load_flows
from agents.service import AgentService

__all__ = ["CatalogReload"]


class CatalogReload:
    """The service's watch of its playbooks folder (:meth:`poll`, a Faust timer)."""

    def __init__(self, service: AgentService, say: Callable[[str], None]) -> None:
        self.service = service
        self.say = say
        settings = service.settings
        self.folder = settings.playbooks_dir
        self.catalog_file = settings.catalog_file
        self.watch = FolderWatch(self.folder)
        self.catalog_mark = self._catalog_mark()

    def _catalog_mark(self) -> tuple[int, int] | None:
        try:
            stat = self.catalog_file.stat()
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size)

    def changed(self) -> list[Path]:
        """The files changed since the last poll: the folder's, and the catalog."""
        changed = self.watch.changed()
        mark = self._catalog_mark()
        if mark != self.catalog_mark:
            self.catalog_mark = mark
            if self.catalog_file not in changed:
                changed.append(self.catalog_file)
        return changed

    async def poll(self) -> None:
        """Take what changed in the folder since the last poll, or say why not
        (``schedules.yaml`` and scenarios are the worker's, or no one's)."""
        folder = self.folder
        if any(not is_schedules(p, folder) and not is_scenario(p) for p in self.changed()):
            self.reload()

    def reload(self) -> None:
        """Load and check the catalog and the flows; take them, or say why not."""
        try:
            catalog = load_catalog_file(self.catalog_file)
        except LemongraphError as exc:  # a CatalogError, or YAML that does not parse
            problems = exc.problems if isinstance(exc, CatalogError) else []
            first = (problems or str(exc).splitlines() or [""])[0]
            if not first.startswith(str(self.catalog_file)):
                first = f"{self.catalog_file}: {first}"
            self.say(f"agents: reload: refused: {first}")
            return
        service = self.service
        old = service.flows
        flows = load_flows(self.folder, catalog, self.say)
        changed = sorted(
            name
            for name, flow in flows.by_name.items()
            if name in old.by_name and flow.spec != old.by_name[name].spec
        )
        if changed:
            self.say(
                f"agents: reload: refused flows {', '.join(changed)}: a flow the service runs "
                "already changed, and its runs in progress were started by the old "
                "definition: give the changed flow a new name (and the milestone's `flow:`), "
                "or restart the agents service; nothing of this change is taken"
            )
            return
        if set(catalog.mcp_servers) != set(service.catalog.mcp_servers):
            self.say(
                "agents: reload: the catalog's MCP servers changed: they start with the "
                "service, so the new ones are used after a restart"
            )
        service.catalog = catalog
        service.flows = flows
        service.execute = None  # made again with the new catalog at the next flow call
        self.say(f"agents: reload: took {self.catalog_file} ({_described(catalog, flows)})")


def _described(catalog: Catalog, flows: Flows) -> str:
    return (
        f"{len(catalog.agents)} agents; {len(flows.by_milestone)} milestones run by "
        f"{len(flows.by_name)} flows"
    )
