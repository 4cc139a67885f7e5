"""For development: the stand-in model, demo tools and handlers, in-process serving,
the agents bench."""
