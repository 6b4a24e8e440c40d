"""`python -m app …`: the command-line front-end (see app/cli/main.py)."""

from app.cli.common import EXIT_INTERRUPTED
from app.cli.main import main

try:
    code = main()
except KeyboardInterrupt:
    # A second interrupt after main said "interrupted" (a signal that was still pending when
    # the first was handled): the exit code stays an interrupt's, not a death by SIGINT.
    from runners.benchmark.shutdown import forget_caught_interrupt

    forget_caught_interrupt()
    code = EXIT_INTERRUPTED
raise SystemExit(code)
