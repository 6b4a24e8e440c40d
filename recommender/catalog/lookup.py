"""The bundled hardware and model catalogs over `data/catalog/`: loading, validation, lookup.

Reads and validates the YAML (at call time, cached per directory), resolves names and aliases
case-insensitively, and hands local paths, and the Hugging Face configs aiconfigurator-core
bundles (`model_configs/<org>--<name>_config.json`, found by HF id), to
`hf_config.load_model`. The records themselves live in `specs.py`.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from core.errors import CatalogError, UnknownCatalogEntryError
from recommender.catalog.hf_config import load_model
from recommender.catalog.specs import GPU, ModelSpec

__all__ = ["BundledConfig", "bundled_configs", "bundled_model",
           "find_bundled", "get_gpu", "get_model", "load_gpus",
           "load_models"]

DEFAULT_CATALOG_DIR = Path(__file__).resolve().parents[2] / "data" / "catalog"
GPUS_FILE = "gpus.yaml"
MODELS_FILE = "models.yaml"
BUNDLED_PACKAGE = "aiconfigurator_core"  # its model_configs/ holds HF configs by HF id
BUNDLED_SUFFIX, BUNDLED_QUANT_SUFFIX = "_config.json", "_hf_quant_config.json"


# ---------------------------------------------------------------------------------------------
# Bundled catalogs


def _normalize(name: str) -> str:
    """Lookup key: case-insensitive, runs of spaces/underscores treated as '-'."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def _catalog_dir(catalog_dir: str | Path | None) -> Path:
    return Path(catalog_dir).resolve() if catalog_dir is not None else DEFAULT_CATALOG_DIR


def _read_entries(path: Path, key: str) -> list[dict[str, Any]]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
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
        explicit = [_normalize(k) for k in (record.name, *record.aliases)]
        for key in {k for k in explicit if explicit.count(k) > 1}:
            raise CatalogError(f"{path}: {canonical!r} lists name or alias {key!r} twice")
        implicit = [
            _normalize(k.split("/", 1)[1]) for k in (record.name, *record.aliases) if "/" in k
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


def _suggest(name: str, index: Mapping[str, str]) -> list[str]:
    """Up to three canonical names whose keys are closest to `name`."""
    close = difflib.get_close_matches(_normalize(name), list(index), n=6, cutoff=0.5)
    return list(dict.fromkeys(index[c] for c in close))[:3]


def _hint(suggestions: list[str]) -> str:
    return f"did you mean {', '.join(suggestions)}?" if suggestions else "no close match"


def _lookup(name: str, index: dict[str, str], what: str) -> str:
    canonical = index.get(_normalize(name))
    if canonical is not None:
        return canonical
    raise UnknownCatalogEntryError(
        f"unknown {what} {name!r}: {_hint(_suggest(name, index))} "
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
# aiconfigurator-core's bundled Hugging Face configs


@dataclass(frozen=True, slots=True)
class BundledConfig:
    """One HF config aiconfigurator-core bundles, and ModelOpt's quant config beside it."""

    hf_id: str  # 'org/name' as the file spells it
    config: Path
    quant: Path | None


@functools.cache
def _bundled() -> tuple[dict[str, BundledConfig], dict[str, str], str]:
    """(HF id → config, normalized id or unique name part → HF id, source label); empty when
    aiconfigurator-core is not installed. Found without importing the package."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    folder = Path(roots[0]) / "model_configs" if roots else None
    if folder is None or not folder.is_dir():
        return {}, {}, ""
    configs: dict[str, BundledConfig] = {}
    for file in sorted(folder.glob(f"*--*{BUNDLED_SUFFIX}")):
        if file.name.endswith(BUNDLED_QUANT_SUFFIX):
            continue
        hf_id = file.name.removesuffix(BUNDLED_SUFFIX).replace("--", "/", 1)
        quant = file.with_name(file.name.removesuffix(BUNDLED_SUFFIX) + BUNDLED_QUANT_SUFFIX)
        configs[hf_id] = BundledConfig(hf_id, file, quant if quant.is_file() else None)
    index = {_normalize(hf_id): hf_id for hf_id in configs}
    short: dict[str, list[str]] = {}
    for hf_id in configs:
        short.setdefault(_normalize(hf_id.split("/", 1)[1]), []).append(hf_id)
    index |= {k: ids[0] for k, ids in short.items() if len(ids) == 1 and k not in index}
    try:
        label = f"aiconfigurator-core {version('aiconfigurator-core')} bundled config"
    except PackageNotFoundError:
        label = "aiconfigurator-core bundled config"
    return configs, index, label


def bundled_configs() -> dict[str, BundledConfig]:
    """Every HF config aiconfigurator-core bundles, by HF id (none when it is not installed).
    Some describe models `get_model` refuses (hybrid Mamba, linear attention, ...)."""
    return dict(_bundled()[0])


def find_bundled(name: str) -> BundledConfig | None:
    """The bundled config for HF id `name` (case-insensitive; the part after the org when
    only one org has it), or None."""
    configs, index, _ = _bundled()
    hf_id = index.get(_normalize(name))
    return configs[hf_id] if hf_id is not None else None


@functools.cache
def _bundled_model(hf_id: str) -> ModelSpec:
    configs, _, label = _bundled()
    entry = configs[hf_id]
    return load_model(entry.config, name=hf_id, source=label, quant_path=entry.quant)


def bundled_model(name: str) -> ModelSpec:
    """The spec read from aiconfigurator-core's bundled config for `name` (matched as by
    `find_bundled`), whether or not the catalog has the model too (read once, cached).

    Raises:
        UnknownCatalogEntryError: no bundled config has that id.
        CatalogError: the config cannot be used; one line naming the id and the reason.
    """
    found = find_bundled(name)
    if found is None:
        raise UnknownCatalogEntryError(f"no aiconfigurator-core bundled config for {name!r}")
    return _bundled_model(found.hf_id)


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
    canonical = index.get(_normalize(text))
    if canonical is not None:
        return records[canonical]
    if Path(text).exists():
        return load_model(text)
    bundled = find_bundled(text)
    if bundled is not None:
        return _bundled_model(bundled.hf_id)
    configs, bundled_index, _ = _bundled()
    suggestions = _suggest(text, index | {k: v for k, v in bundled_index.items()
                                          if k not in index})
    known = f"{len(records)} catalog models, {len(configs)} aiconfigurator-core configs"
    raise UnknownCatalogEntryError(
        f"unknown model {text!r}: {_hint(suggestions)} ({known}; or pass a config.json path)"
    )
