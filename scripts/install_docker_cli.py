"""Install the Docker CLI's static binary (no daemon) into a folder; used by the Dockerfile.

Usage: python scripts/install_docker_cli.py VERSION DEST_DIR [ARCH]
ARCH is Docker's name for the machine (amd64 or arm64, BuildKit's TARGETARCH); default: this
machine's. Only the `docker` client is extracted from Docker's release archive.
"""

from __future__ import annotations

import io
import platform
import sys
import tarfile
import urllib.request
from pathlib import Path

RELEASES = "https://download.docker.com/linux/static/stable"
ARCHES = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}


def extract_client(archive: bytes, dest: Path) -> Path:
    """Write the release archive's `docker/docker` to DEST/docker, executable; return it."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        member = tar.getmember("docker/docker")
        data = tar.extractfile(member)
        if data is None:
            raise ValueError("docker/docker in the archive is not a file")
        payload = data.read()
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / "docker"
    target.write_bytes(payload)
    target.chmod(0o755)
    return target


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    version, dest = argv[0], Path(argv[1])
    arch = ARCHES.get(argv[2] if len(argv) == 3 else platform.machine())
    if arch is None:
        print(f"unsupported architecture {argv[2:] or platform.machine()}", file=sys.stderr)
        return 2
    url = f"{RELEASES}/{arch}/docker-{version}.tgz"
    with urllib.request.urlopen(url, timeout=120) as response:
        target = extract_client(response.read(), dest)
    print(f"installed docker CLI {version} ({arch}) at {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
