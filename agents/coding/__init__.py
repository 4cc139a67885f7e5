"""The coding workflow (docs/coding.md): an isolated worktree per job, the
editor's confined tools, one writer per repository, and trusted validation."""
