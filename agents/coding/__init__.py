"""The coding workflow (docs/coding.md): trusted validation, the coding flow's
handlers and the ``lemongraph code`` commands, built on a job's worktree and
its confined editor (agents/workspace/)."""
