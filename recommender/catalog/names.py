"""How a name given for a catalog entry is matched: the normalized lookup key, and the closest
known names offered when nothing matches.

Shared by the YAML catalogs (`lookup`) and aiconfigurator-core's bundled configs (`bundled`);
which names exist is theirs.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping


def normalize(name: str) -> str:
    """Lookup key: case-insensitive, runs of spaces/underscores treated as '-'."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def suggest(name: str, index: Mapping[str, str]) -> list[str]:
    """Up to three canonical names whose keys are closest to `name`."""
    close = difflib.get_close_matches(normalize(name), list(index), n=6, cutoff=0.5)
    return list(dict.fromkeys(index[c] for c in close))[:3]


def hint(suggestions: list[str]) -> str:
    return f"did you mean {', '.join(suggestions)}?" if suggestions else "no close match"


__all__ = ["hint", "normalize", "suggest"]
