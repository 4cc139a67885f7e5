"""The catalog's tools and the trusted executor that runs them
(docs/agents.md, "Tools as evidence"): the executor, what success is, and one
module per tool kind."""
