"""`python -m app …`: the command-line front-end (see app/cli.py)."""

from app.cli import main

raise SystemExit(main())
