"""``python -m stream`` is ``lemongraph``."""

from stream.cli import main

main()
