"""A job's own git worktree and what may be done in it (docs/coding.md,
"Worktrees", "The editor's tools", "One writer per repository"): the worktree
and its fingerprint, the editor's confined ops (the ``workspace`` tool kind the
executor runs), and the lease that keeps one writer per repository. The coding
workflow (agents/coding/) is built on it."""
