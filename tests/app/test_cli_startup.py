"""CLI start-up stays light: the top-level help imports no command's registries, and a
command's parser has its own options (whose choices come from the registries) only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "pandas", "duckdb", "aiohttp", "recommender", "runners", "engines")


def _modules_after(argv: list[str]) -> set[str]:
    code = ("import sys, contextlib, io\nfrom app.cli.main import main\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            f"    main({argv!r})\n"
            "print('\\n'.join(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    return {m.split(".")[0] for m in out.stdout.split()}


def test_top_level_help_imports_nothing_heavy():
    loaded = _modules_after(["--help"])
    assert "app" in loaded  # the walk sees real imports
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_a_commands_help_imports_its_registries_only():
    loaded = _modules_after(["profile", "--help"])
    assert "profiler" in loaded
    assert not loaded & {"recommender", "runners", "aiohttp"}


def test_each_command_keeps_its_options(capsys):
    from app.cli.main import main

    for command, option in (("predict", "--step-time"), ("bench", "--workload"),
                            ("recommend", "--objective"), ("profile", "--format")):
        try:
            main([command, "--help"])
        except SystemExit as exc:
            assert exc.code == 0
        assert option in capsys.readouterr().out
