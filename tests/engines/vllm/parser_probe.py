"""Run under the real vLLM's interpreter: parse `vllm serve` argv with vLLM's own parser.

Reads a JSON list of argument lists on stdin (each without the leading `vllm`), parses each
with the `serve` sub-parser vLLM itself builds (which also expands `--config FILE`), runs
vLLM's own serve-argument validation, and prints one JSON object of the parsed values per
list. A list vLLM rejects prints {"error": "..."} instead. With `--flags` it prints the serve
parser's long flags instead (engines/vllm/flags.py is that list). Imports nothing of ServeFit's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys

# Fields vLLM fills with a fresh random value on every parse.
RANDOM_FIELDS = frozenset({"engine_id"})


def _parser():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subparser", required=True)
    ServeSubcommand().subparser_init(subparsers)
    return parser


def _jsonable(value):
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if dataclasses.is_dataclass(value):  # vLLM parses JSON options into config dataclasses
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.name not in RANDOM_FIELDS}
    return str(value)


def main() -> None:
    from vllm.entrypoints.cli.serve import ServeSubcommand

    parser = _parser()
    for argv in json.load(sys.stdin):
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                args = parser.parse_args(argv)
                ServeSubcommand().validate(args)
            out = {k: _jsonable(v) for k, v in vars(args).items()}
        except (SystemExit, Exception) as exc:  # argparse exits; validation raises
            out = {"error": f"{type(exc).__name__}: {exc} {stderr.getvalue().strip()}"}
        print(json.dumps(out))


def flags() -> None:
    """Print {"switches": [...], "values": [...]}: the serve parser's long flags (no --help)."""
    parser = _parser()
    serve = next(a for a in parser._actions if a.choices and "serve" in a.choices)
    out: dict[str, list[str]] = {"switches": [], "values": []}
    for action in serve.choices["serve"]._actions:
        for option in action.option_strings:
            if option.startswith("--") and option != "--help":
                out["switches" if action.nargs == 0 else "values"].append(option[2:])
    print(json.dumps(out))


if __name__ == "__main__":
    flags() if sys.argv[1:] == ["--flags"] else main()
