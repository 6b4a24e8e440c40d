"""The bundled hardware and model catalogs over `data/catalog/`: loading, validation, lookup.

Reads and validates the YAML (at call time, cached per directory), resolves names and aliases
case-insensitively (`names`), and hands local paths, and the Hugging Face configs
aiconfigurator-core bundles (found by HF id in `bundled`), to `hf_config.load_model`. The
records themselves live in `specs.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from core.errors import CatalogError, UnknownCatalogEntryError
from recommender.catalog.bundled import bundled_index, bundled_spec, find_bundled
from recommender.catalog.hf_config import load_model
from recommender.catalog.names import hint, normalize, suggest
from recommender.catalog.specs import GPU, ModelSpec

__all__ = ["get_gpu", "get_model", "load_gpus", "load_models"]

DEFAULT_CATALOG_DIR = Path(__file__).resolve().parents[2] / "data" / "catalog"
# libyaml's safe loader where PyYAML was built with it (the wheels are): the same documents,
# the catalog read in ~5 ms instead of ~35 ms, which every CLI process pays.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
GPUS_FILE = "gpus.yaml"
MODELS_FILE = "models.yaml"


# ---------------------------------------------------------------------------------------------
# Bundled catalogs


def _catalog_dir(catalog_dir: str | Path | None) -> Path:
    return Path(catalog_dir).resolve() if catalog_dir is not None else DEFAULT_CATALOG_DIR


def _read_entries(path: Path, key: str) -> list[dict[str, Any]]:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read catalog ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from exc
    if not isinstance(data, dict) or set(data) != {key} or not isinstance(data[key], list):
        raise CatalogError(f"{path}: expected one top-level key {key!r} holding a list")
    entries = data[key]
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise CatalogError(f"{path}: {key}[{i}] is not a mapping")
    return entries


_RecordT = TypeVar("_RecordT", bound=BaseModel)


def _validate(cls: type[_RecordT], entry: dict[str, Any], path: Path, i: int) -> _RecordT:
    try:
        return cls.model_validate(entry)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "entry"
        name = entry.get("name", f"#{i}")
        raise CatalogError(
            f"{path}: entry {name!r}: {where}: {first['msg']} ({exc.error_count()} error(s))"
        ) from exc


def _build_index(records: Mapping[str, GPU | ModelSpec], path: Path) -> dict[str, str]:
    """Map every normalized name and alias to its canonical name; duplicates are an error.

    For Hugging Face ids the part after the org ('Qwen3-8B') is an implicit alias too.
    """
    index: dict[str, str] = {}
    for canonical, record in records.items():
        explicit = [normalize(k) for k in (record.name, *record.aliases)]
        for key in {k for k in explicit if explicit.count(k) > 1}:
            raise CatalogError(f"{path}: {canonical!r} lists name or alias {key!r} twice")
        implicit = [
            normalize(k.split("/", 1)[1]) for k in (record.name, *record.aliases) if "/" in k
        ]
        for key in dict.fromkeys([*explicit, *implicit]):
            owner = index.setdefault(key, canonical)
            if owner != canonical:
                raise CatalogError(
                    f"{path}: name or alias {key!r} is used by both {owner!r} and {canonical!r}"
                )
    return index


@functools.cache
def _gpus_cached(catalog_dir: Path) -> tuple[dict[str, GPU], dict[str, str]]:
    path = catalog_dir / GPUS_FILE
    records: dict[str, GPU] = {}
    for i, entry in enumerate(_read_entries(path, "gpus")):
        gpu = _validate(GPU, entry, path, i)
        if gpu.name in records:
            raise CatalogError(f"{path}: GPU {gpu.name!r} is listed twice")
        records[gpu.name] = gpu
    return records, _build_index(records, path)


@functools.cache
def _models_cached(catalog_dir: Path) -> tuple[dict[str, ModelSpec], dict[str, str]]:
    path = catalog_dir / MODELS_FILE
    records: dict[str, ModelSpec] = {}
    for i, entry in enumerate(_read_entries(path, "models")):
        model = _validate(ModelSpec, entry, path, i)
        if model.name in records:
            raise CatalogError(f"{path}: model {model.name!r} is listed twice")
        records[model.name] = model
    return records, _build_index(records, path)


def load_gpus(catalog_dir: str | Path | None = None) -> dict[str, GPU]:
    """Every GPU in the catalog, keyed by canonical name (read once per directory, cached).

    Args:
        catalog_dir: folder holding gpus.yaml; defaults to the bundled data/catalog/.

    Returns:
        Canonical name -> GPU.

    Raises:
        CatalogError: the file is missing or malformed, or an entry fails validation
            (bad number, inconsistent dtypes, duplicate name or alias).
    """
    return dict(_gpus_cached(_catalog_dir(catalog_dir))[0])


def load_models(catalog_dir: str | Path | None = None) -> dict[str, ModelSpec]:
    """Every model in the catalog, keyed by Hugging Face id (read once per directory, cached).

    Args:
        catalog_dir: folder holding models.yaml; defaults to the bundled data/catalog/.

    Returns:
        Hugging Face id -> ModelSpec.

    Raises:
        CatalogError: the file is missing or malformed, or an entry fails validation
            (kv heads not dividing heads, MLA without its ranks, duplicate name or alias, ...).
    """
    return dict(_models_cached(_catalog_dir(catalog_dir))[0])


def _lookup(name: str, index: dict[str, str], what: str) -> str:
    canonical = index.get(normalize(name))
    if canonical is not None:
        return canonical
    raise UnknownCatalogEntryError(
        f"unknown {what} {name!r}: {hint(suggest(name, index))} "
        f"(known: {', '.join(sorted(set(index.values())))})"
    )


def get_gpu(name: str, catalog_dir: str | Path | None = None) -> GPU:
    """The GPU called `name` or one of its aliases, case-insensitively ('h100 sxm' works).

    Raises:
        UnknownCatalogEntryError: no entry matches; the message names the closest ones.
        CatalogError: the catalog itself is broken.
    """
    records, index = _gpus_cached(_catalog_dir(catalog_dir))
    return records[_lookup(name, index, "GPU")]


# ---------------------------------------------------------------------------------------------
# Models


def get_model(name_or_path: str | Path, catalog_dir: str | Path | None = None) -> ModelSpec:
    """A model by HF id, alias or path, looked up in this order: a `Path` or a name ending in
    '.json' is a local config; else the catalog (HF id or alias, case-insensitive); else an
    existing local config.json or folder; else the HF config aiconfigurator-core bundles for
    that id (`find_bundled`), all read with `load_model` (shapes, estimated parameters).

    Raises:
        UnknownCatalogEntryError: nothing describes the name; one line naming the closest
            catalog models and bundled configs, and how many of each there are.
        CatalogError: the catalog is broken, or the config cannot be used (a local one's
            file, or a bundled one's id, named with the reason: e.g. hybrid Mamba layers).
    """
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or text.endswith(".json"):
        return load_model(text)
    records, index = _models_cached(_catalog_dir(catalog_dir))
    canonical = index.get(normalize(text))
    if canonical is not None:
        return records[canonical]
    if Path(text).exists():
        return load_model(text)
    bundled = find_bundled(text)
    if bundled is not None:
        return bundled_spec(bundled.hf_id)
    configs, bundled_names, _ = bundled_index()
    suggestions = suggest(text, index | {k: v for k, v in bundled_names.items()
                                          if k not in index})
    known = f"{len(records)} catalog models, {len(configs)} aiconfigurator-core configs"
    raise UnknownCatalogEntryError(
        f"unknown model {text!r}: {hint(suggestions)} ({known}; or pass a config.json path)"
    )
