"""Placeholders for paths known only where the bundle runs (its own folder, the Hugging Face
cache) and their substitution: each output format (shell scripts, compose, Kubernetes)
replaces them with its own spelling and quotes the rest of the text its own way.
"""

from __future__ import annotations

import re
from typing import Any

BUNDLE_DIR = "/@SERVEFITBUNDLE_DIR@"
HF_CACHE = "/@SERVEFITHF_CACHE@"


def substitute(arg: str, paths: dict[str, str], quote: Any) -> str:
    """`arg` with each placeholder replaced by `paths[...]` and the rest passed to `quote`."""
    pattern = "|".join(re.escape(key) for key in paths)
    pieces: list[str] = []
    pos = 0
    for match in re.finditer(pattern, arg):
        if match.start() > pos:
            pieces.append(quote(arg[pos:match.start()]))
        pieces.append(paths[match.group()])
        pos = match.end()
    if pos < len(arg) or not pieces:
        pieces.append(quote(arg[pos:]))
    return "".join(pieces)
