"""Errors the recommender raises on purpose, under the project's one exception tree.

`CatalogError` covers a broken bundled catalog and an unreadable or unsupported model
`config.json`; `UnknownCatalogEntryError` is a name the user typed that no entry matches.
"""

from __future__ import annotations

from profiler.errors import ServeFitError, UsageError


class CatalogError(ServeFitError):
    """A GPU or model catalog, or a model `config.json`, is missing, malformed or inconsistent."""


class UnknownCatalogEntryError(CatalogError, UsageError):
    """A GPU or model name matches no catalog entry; the message suggests the closest ones."""
