"""The Hugging Face configs aiconfigurator-core bundles (`model_configs/<org>--<name>_config.json`,
with ModelOpt's `_hf_quant_config.json` beside some), found by HF id without importing the
package, and read as models with `hf_config.load_model`.

Owns which bundled configs exist and the spec each one reads as; the catalog lookup that falls
back to them (`lookup.get_model`) is not here.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from core.errors import UnknownCatalogEntryError
from recommender.catalog.hf_config import load_model
from recommender.catalog.names import normalize
from recommender.catalog.specs import ModelSpec

BUNDLED_PACKAGE = "aiconfigurator_core"  # its model_configs/ holds HF configs by HF id
BUNDLED_SUFFIX, BUNDLED_QUANT_SUFFIX = "_config.json", "_hf_quant_config.json"


@dataclass(frozen=True, slots=True)
class BundledConfig:
    """One HF config aiconfigurator-core bundles, and ModelOpt's quant config beside it."""

    hf_id: str  # 'org/name' as the file spells it
    config: Path
    quant: Path | None


@functools.cache
def bundled_index() -> tuple[dict[str, BundledConfig], dict[str, str], str]:
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
    index = {normalize(hf_id): hf_id for hf_id in configs}
    short: dict[str, list[str]] = {}
    for hf_id in configs:
        short.setdefault(normalize(hf_id.split("/", 1)[1]), []).append(hf_id)
    index |= {k: ids[0] for k, ids in short.items() if len(ids) == 1 and k not in index}
    try:
        label = f"aiconfigurator-core {version('aiconfigurator-core')} bundled config"
    except PackageNotFoundError:
        label = "aiconfigurator-core bundled config"
    return configs, index, label


def bundled_configs() -> dict[str, BundledConfig]:
    """Every HF config aiconfigurator-core bundles, by HF id (none when it is not installed).
    Some describe models `get_model` refuses (hybrid Mamba, linear attention, ...)."""
    return dict(bundled_index()[0])


def find_bundled(name: str) -> BundledConfig | None:
    """The bundled config for HF id `name` (case-insensitive; the part after the org when
    only one org has it), or None."""
    configs, index, _ = bundled_index()
    hf_id = index.get(normalize(name))
    return configs[hf_id] if hf_id is not None else None


@functools.cache
def bundled_spec(hf_id: str) -> ModelSpec:
    """The spec read from the bundled config of exactly `hf_id` (read once, cached)."""
    configs, _, label = bundled_index()
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
    return bundled_spec(found.hf_id)


__all__ = ["BUNDLED_PACKAGE", "BundledConfig", "bundled_configs", "bundled_index",
           "bundled_model", "bundled_spec", "find_bundled"]
