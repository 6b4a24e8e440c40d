"""What more than one CLI module needs: each command's one-line help, the exit codes of a
stopped command, one-line usage errors from pydantic validation, and the atomic write of a
command's output file (`app.cli.main`, `app.cli.bench` and `app.cli.recommend` import from here,
never from each other)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from core.atomic import write_atomic
from core.errors import UsageError

if TYPE_CHECKING:
    from pydantic import ValidationError

# Every command and its line in `python -m app --help`. Only the command being run gets its
# options (whose choices import the registries that own them), so start-up stays light.
COMMAND_HELP = {
    "profile": "ingest a trace and print its load profile",
    "synth": "write a synthetic trace with a profile's shape",
    "predict": "the performance model alone, for a fixed-length load",
    "export": "write config file, launch scripts, docker-compose, Kubernetes manifest, bench "
              "command and report",
    "bench": "live benchmark of an endpoint or a launched engine",
    "recommend": "rank engines and configs for a trace on a GPU",
}

# A command stopped by a signal exits as a shell reports a process that signal ended.
EXIT_INTERRUPTED = 128 + 2  # SIGINT (Ctrl-C)
EXIT_TERMINATED = 128 + 15  # SIGTERM


def usage_error(exc: ValidationError, *, option: bool = False,
                flags: dict[str, str] | None = None) -> UsageError:
    """The first validation error as one line, `where: message`; `option` names the field as
    a command-line option (`--max-requests`), `flags` the fields whose option is named
    otherwise (`gpu_price_per_hour_usd` is `--gpu-price-per-hour`)."""
    first = exc.errors()[0]
    where = ".".join(str(x) for x in first["loc"])
    if option and first["loc"]:  # the field as its option, then the key / index it concerns
        field, *inner = (str(x) for x in first["loc"])
        flag = (flags or {}).get(field, "--" + field.replace("_", "-"))
        where = " ".join([flag, *(x for x in inner if x != "[key]")])
    # a model-level check has no field; its message is ours ("Value error, " is pydantic's)
    message = str(first["msg"]).removeprefix("Value error, ")
    return UsageError(f"{where}: {message}" if where else message)


def key_values(items: list[str], option: str, shape: str) -> list[tuple[str, str]]:
    """The `KEY=VALUE` items of a repeatable option as (key, value) pairs, keys stripped.

    Raises:
        UsageError: an item without `=` or with an empty side (`shape` names the form).
    """
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value:
            raise UsageError(f"{option} {item!r}: expected {shape}")
        pairs.append((key.strip(), value))
    return pairs


def write_output(path: str | Path, text: str) -> None:
    """Write a command's output file atomically (nothing appears when the write fails, nor
    after a Ctrl-C).

    Raises:
        UsageError: the file or its folder cannot be written.
        KeyboardInterrupt: a Ctrl-C arrived, even one a library swallowed.
    """
    from runners.benchmark.shutdown import raise_if_interrupted

    raise_if_interrupted()  # a Ctrl-C a library swallowed: the command was stopped, no file
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
