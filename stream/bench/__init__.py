"""``lemongraph bench``: one run, one broker, every figure side by side.

See ``run.py`` for the run, ``figures.py`` for the table it prints and
``README.md`` (section Benchmarks) for what each figure means.
"""
