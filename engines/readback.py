"""Reading an engine's config file back into the EngineConfig that wrote it: the file's
top-level mapping, engine spellings mapped back to ours, the config validated with a one-line
error, and the refusal of a file or launch command that differs from what that config renders
(so a file that is not ServeFit's is never half-read).

Engine-neutral by construction: callers pass their own tables and wording.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml
from pydantic import ValidationError

from engines.config import EngineConfig
from engines.errors import EngineError


def load_mapping(text: str, what: str) -> dict[str, Any]:
    """The top-level YAML mapping of `text` (string keys).

    Raises:
        EngineError: not YAML, or not a mapping with string keys.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise EngineError(f"{what} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise EngineError(f"{what} must be a mapping of setting names to values")
    return data


def unknown_key(key: str, what: str) -> EngineError:
    """The one-line error for a key ServeFit never writes into `what`."""
    return EngineError(f"unknown key {key!r} in {what}; not a file ServeFit wrote")


def reverse(table: Mapping[str, str | None], field: str) -> Callable[[Any, str], str]:
    """Map an engine spelling back to ours (the first key of `table` that renders to it)."""
    back: dict[str, str] = {}
    for ours, theirs in table.items():
        if theirs is not None:
            back.setdefault(theirs, ours)

    def find(value: Any, what: str) -> str:
        if not isinstance(value, str) or value not in back:
            raise EngineError(f"{field}: {value!r} in {what} is not a value ServeFit writes")
        return back[value]

    return find


def build_config(fields: dict[str, Any], what: str) -> EngineConfig:
    """EngineConfig from parsed fields.

    Raises:
        EngineError: one line naming the first field pydantic refuses.
    """
    try:
        return EngineConfig.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"][:2]) or "config"
        raise EngineError(f"{what}: {where}: {err['msg']}") from None


def same_as_rendered(got: Mapping[str, Any], rendered: Mapping[str, Any], what: str) -> None:
    """Refuse a file whose keys or values differ from what `config_file` writes for the config
    read from it (so a file that is not ours is never half-read).

    Raises:
        EngineError: naming the first key that differs.
    """
    for key in [*got, *rendered]:
        if key not in rendered:
            raise EngineError(f"key {key!r} in {what} is not one ServeFit writes for its settings")
        if key not in got or got[key] != rendered[key] or type(got[key]) is not type(
            rendered[key]
        ):
            raise EngineError(
                f"key {key!r} in {what} is {got.get(key)!r}; ServeFit writes "
                f"{rendered[key]!r} for the settings read"
            )


def same_argv(argv: Sequence[str], expected: Sequence[str], what: str) -> None:
    """Refuse a launch command that differs from the one rendered for the config read.

    Raises:
        EngineError: naming the first argument that differs.
    """
    for index, (got, want) in enumerate(zip(argv, expected, strict=False)):
        if got != want:
            raise EngineError(f"{what} argument {index} is {got!r}; expected {want!r}")
    if len(argv) != len(expected):
        raise EngineError(f"{what} has {len(argv)} arguments; expected {len(expected)}")
