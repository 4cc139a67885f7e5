"""LGFlow's files read into this language (docs/flows.md, "Coming from LGFlow"):
the versions and their features, and the translation. Pure: data in, data out."""

from compiler.flows.lgflow._features import (
    FEATURE_VERSIONS,
    LGFLOW_VERSIONS,
    features_used,
    lgflow_version,
)
from compiler.flows.lgflow._translate import (
    Change,
    Refusal,
    Translation,
    dump_flow,
    relocate,
    translate_lgflow,
)

__all__ = [
    "FEATURE_VERSIONS",
    "LGFLOW_VERSIONS",
    "Change",
    "Refusal",
    "Translation",
    "dump_flow",
    "features_used",
    "lgflow_version",
    "relocate",
    "translate_lgflow",
]
