"""Error text reaches a terminal: control characters are shown, never obeyed; a validation
error becomes one line (`first_problem`)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field, ValidationError, field_validator

from app.cli.main import main
from core.errors import first_problem, printable
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


class _Inner(BaseModel):
    rate: float = Field(gt=0)


class _Outer(BaseModel):
    inner: _Inner
    name: str

    @field_validator("name")
    @classmethod
    def _short(cls, value: str) -> str:
        if len(value) > 3:
            raise ValueError("name is too long")
        return value


def test_first_problem_is_the_first_fields_dotted_path_and_message():
    with pytest.raises(ValidationError) as caught:
        _Outer.model_validate({"inner": {"rate": -1}, "name": "long"})
    assert first_problem(caught.value) == ("inner.rate", "Input should be greater than 0")


def test_first_problem_drops_pydantics_prefix_of_a_validators_own_text():
    with pytest.raises(ValidationError) as caught:
        _Outer.model_validate({"inner": {"rate": 1}, "name": "long"})
    assert first_problem(caught.value) == ("name", "name is too long")


def test_first_problem_at_the_top_level_has_no_path():
    with pytest.raises(ValidationError) as caught:
        _Inner.model_validate([1])
    where, message = first_problem(caught.value)
    assert where == "" and "valid dictionary" in message
