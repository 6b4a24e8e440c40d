"""Packaging helpers of the app: stored uploads and the export zip."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

from app.storage import bundle_zip, store_upload
from engines.config import EngineConfig
from engines.export.bundle import render_bundle
from engines.export.request import ExportRequest
from tests import reference as ref


def test_upload_is_stored_once_by_content(app_home):
    data = (ref.TRACES / "BurstGPT_1.head400.csv").read_bytes()
    seen: list[float] = []
    first = store_upload(io.BytesIO(data), "a.csv", len(data), progress=seen.append)
    again = store_upload(io.BytesIO(data), "a.csv", len(data))
    assert first == again and first.digest == hashlib.sha256(data).hexdigest()[:16]
    assert Path(first.path).read_bytes() == data
    assert seen[-1] == 1.0
    leftovers = [p.name for p in (app_home / "uploads").iterdir() if p.is_file()]
    assert leftovers == []  # no temporary file left next to the stored ones


def test_bundle_zip_holds_every_file_with_exec_bits_on_scripts():
    files = render_bundle(ExportRequest(config=EngineConfig(engine="vllm", model="Qwen/Qwen3-8B")))
    with zipfile.ZipFile(io.BytesIO(bundle_zip(files, "servefit-vllm"))) as archive:
        names = archive.namelist()
        assert sorted(names) == sorted(f"servefit-vllm/{n}" for n in files)
        for name, text in files.items():
            info = archive.getinfo(f"servefit-vllm/{name}")
            assert archive.read(info).decode() == text
            assert bool((info.external_attr >> 16) & 0o111) == name.endswith(".sh")
