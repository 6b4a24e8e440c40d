"""The bench/ scripts as modules the tests import (bench/ is a folder of scripts, not a
package): each loaded once under its own name, so a script that imports a sibling by name
(`from predict_accuracy import …`, as run from bench/) finds it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str, *, needs: tuple[str, ...] = ()) -> ModuleType:
    """bench/<name>.py, loaded after the sibling scripts it imports (`needs`)."""
    for sibling in needs:
        bench_module(sibling)
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
