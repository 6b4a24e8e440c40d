"""Error text reaches a terminal: control characters are shown, never obeyed."""

from __future__ import annotations

from app.cli.main import main
from core.errors import printable
from runners.load.failures import one_line


def test_control_characters_are_shown_as_escapes():
    assert printable("a\x1b[31mred\x07\tb\nc\x9b") == "a\\x1b[31mred\\x07\tb\nc\\x9b"
    assert one_line("status 500: \x1b]0;owned\x07  done") == "status 500: \\x1b]0;owned\\x07 done"
    assert printable("plain ünïcode ✓") == "plain ünïcode ✓"


def test_the_cli_prints_an_error_naming_a_hostile_file_without_its_escapes(tmp_path, capsys):
    missing = tmp_path / "\x1b[2J\x1b[31mtrace.csv"
    assert main(["profile", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2J" in err and len(err.strip().splitlines()) == 1
