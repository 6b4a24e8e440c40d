"""The command line (`python -m app`): `main` parses and dispatches; `bench` and `recommend` are
its two largest commands; `common` holds what they share.
"""
