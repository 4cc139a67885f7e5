"""Reading playbook and scenario files from disk (the core only sees text)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from compiler import (
    LemongraphError,
    Playbook,
    PlaybookError,
    PlaybookProblem,
    Schedule,
    load_located,
    load_playbook,
    validate_schedule,
)
from stream.runtime.errors import ConfigError

__all__ = [
    "RELOAD_ENV",
    "FolderWatch",
    "PlaybookSet",
    "ScheduleSet",
    "flow_files",
    "is_catalog",
    "is_flow",
    "is_scenario",
    "is_schedules",
    "load_playbook_file",
    "load_playbooks_dir",
    "load_schedules_file",
    "playbook_files",
    "reload_seconds",
    "scenario_files",
    "schedules_file",
]

_SUFFIXES = (".yaml", ".yml", ".json")


def is_scenario(path: Path) -> bool:
    """``*.scenario.yaml|yml|json``."""
    return path.suffix in _SUFFIXES and path.stem.endswith(".scenario")


def is_catalog(path: Path) -> bool:
    """``catalog.yaml|yml|json``: the agent catalog (docs/agents.md), not a playbook."""
    return path.suffix in _SUFFIXES and path.stem == "catalog"


def is_schedules(path: Path, folder: Path) -> bool:
    """``schedules.yaml|yml|json`` at the top of ``folder``: the schedules it
    declares (docs/schedules.md, "schedules.yaml"), not a playbook."""
    return path.suffix in _SUFFIXES and path.stem == "schedules" and path.parent == folder


def schedules_file(folder: Path) -> Path | None:
    """The folder's ``schedules.yaml`` (or ``.yml``, ``.json``), if it has one."""
    for suffix in _SUFFIXES:
        path = folder / f"schedules{suffix}"
        if path.is_file():
            return path
    return None


def is_standin_script(path: Path) -> bool:
    """``NAME.standin.yaml``: the stand-in model's rules shipped beside a flow
    (docs/flows.md, "Running a flow at the terminal"): neither flow nor playbook."""
    return path.name.endswith((".standin.yaml", ".standin.yml"))


def is_flow(path: Path, folder: Path) -> bool:
    """A file of ``folder/flows/`` (docs/flows.md): a flow, not a playbook."""
    return (
        path.suffix in _SUFFIXES and path.parent == folder / "flows" and not is_standin_script(path)
    )


def playbook_files(folder: Path) -> list[Path]:
    """Every playbook file under ``folder`` (recursively), sorted: every YAML or
    JSON file but scenarios, the agent catalog, the flows (``flows/``) and the
    schedules (``schedules.yaml``)."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and p.suffix in _SUFFIXES
        and not is_scenario(p)
        and not is_catalog(p)
        and not is_flow(p, folder)
        and not is_schedules(p, folder)
        and not is_standin_script(p)
    )


def flow_files(folder: Path) -> list[Path]:
    """The flow files of a playbooks folder: ``flows/NAME.yaml|yml|json``, sorted."""
    flows = folder / "flows"
    if not flows.is_dir():
        return []
    return sorted(
        p
        for p in flows.iterdir()
        if p.is_file() and p.suffix in _SUFFIXES and not is_standin_script(p)
    )


def scenario_files(folder: Path, name_filter: str | None = None) -> list[Path]:
    """Every scenario file under ``folder`` whose path contains ``name_filter``."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and is_scenario(p) and (not name_filter or name_filter in str(p))
    )


def load_playbook_file(path: Path) -> Playbook:
    """Read and compile one playbook file; problems name the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlaybookError([PlaybookProblem(str(path), f"cannot read: {exc}")]) from None
    return load_playbook(text, str(path))


@dataclass
class PlaybookSet:
    """Playbooks loaded from a folder, by key; and every problem found."""

    by_key: dict[str, Playbook]
    problems: list[PlaybookProblem]


def load_playbooks_dir(folder: Path) -> PlaybookSet:
    """Load every playbook in ``folder``. Invalid files and duplicate keys are
    reported, never silently skipped."""
    found = PlaybookSet({}, [])
    if not folder.is_dir():
        found.problems.append(PlaybookProblem(str(folder), "no such folder"))
        return found
    origin: dict[str, Path] = {}
    for path in playbook_files(folder):
        try:
            playbook = load_playbook_file(path)
        except PlaybookError as exc:
            found.problems.extend(exc.problems)
            continue
        if playbook.key in found.by_key:
            found.problems.append(
                PlaybookProblem(
                    str(path),
                    f"playbook key {playbook.key!r} is also used by {origin[playbook.key]}",
                )
            )
            continue
        found.by_key[playbook.key] = playbook
        origin[playbook.key] = path
    return found


@dataclass
class ScheduleSet:
    """The schedules of a ``schedules.yaml``, in file order, and every problem
    found (one line each, naming the file, the line, the schedule and the field)."""

    schedules: list[Schedule]
    problems: list[str]
    #: Where each of ``schedules`` is, ``FILE:LINE: schedules[N] (id)``.
    where: list[str] = field(default_factory=list)


def load_schedules_file(path: Path) -> ScheduleSet:
    """Read ``schedules: [<definition>...]`` (docs/schedules.md,
    "schedules.yaml"). An invalid definition, or a second one with the same id,
    is a problem and is left out; the others are kept."""
    found = ScheduleSet([], [])
    try:
        located = load_located(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError) as exc:
        found.problems.append(f"{path}: cannot read: {exc}")
        return found
    except LemongraphError as exc:
        found.problems.append(str(exc).splitlines()[0])
        return found
    data = located.data
    if not isinstance(data, dict) or set(data) != {"schedules"}:
        found.problems.append(
            f"{path}: expected one key, schedules: a list of schedule definitions"
        )
        return found
    items = data["schedules"]
    if items is None:
        return found
    if not isinstance(items, list):
        found.problems.append(f"{path}: schedules: must be a list of schedule definitions")
        return found
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        where = located.position(("schedules", index))
        at = f"{path}:{where.line}" if where is not None else str(path)
        name = item.get("id") or item.get("name") if isinstance(item, dict) else None
        label = f"schedules[{index}]" + (f" ({name})" if isinstance(name, str) else "")
        try:
            schedule = validate_schedule(item, f"{path}: {label}")
        except LemongraphError as exc:
            found.problems.append(f"{at}: {label}: {str(exc).splitlines()[0]}")
            continue
        if schedule.id in seen:
            found.problems.append(
                f"{at}: {label}: id {schedule.id!r} is also used by schedules[{seen[schedule.id]}]"
            )
            continue
        seen[schedule.id] = index
        found.schedules.append(schedule)
        found.where.append(f"{at}: {label}")
    return found


#: Seconds between two looks of a worker or agents service at its playbooks
#: folder; unset, empty or 0: it does not look (``lemongraph dev`` sets 1).
RELOAD_ENV = "LEMONGRAPH_RELOAD"


def reload_seconds(env: Mapping[str, str]) -> float:
    """``LEMONGRAPH_RELOAD`` (docs/operations.md, "Reloading"): 0 is off."""
    text = env.get(RELOAD_ENV, "").strip() or "0"
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 3600:
        raise ConfigError(f"{RELOAD_ENV}={text!r} must be seconds from 0 (off) to 3600")
    return seconds


class FolderWatch:
    """The YAML and JSON files of a folder (recursively), polled for changes by
    their modification time and size: no dependency, and cheap at the size of a
    playbooks folder (docs/operations.md, "Reloading")."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.seen = self.scan()

    def scan(self) -> dict[Path, tuple[int, int]]:
        """Each file's ``(mtime_ns, size)`` now (one ``stat`` per entry, by
        ``os.scandir``, which most systems answer from the directory read)."""
        found: dict[Path, tuple[int, int]] = {}
        folders = [self.folder]
        while folders:
            try:
                entries = list(os.scandir(folders.pop()))
            except OSError:  # not there (yet), or removed meanwhile
                continue
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(Path(entry.path))
                    elif os.path.splitext(entry.name)[1] in _SUFFIXES and entry.is_file():
                        stat = entry.stat()
                        found[Path(entry.path)] = (stat.st_mtime_ns, stat.st_size)
                except OSError:
                    continue
        return found

    def changed(self) -> list[Path]:
        """The files added or changed since the last call (or the start), sorted;
        a removed file is not a change (what was registered stays registered)."""
        now = self.scan()
        changed = sorted(p for p, mark in now.items() if self.seen.get(p) != mark)
        self.seen = now
        return changed
