"""Schedule definitions and cron (docs/schedules.md)."""
