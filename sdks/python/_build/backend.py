"""
A PEP 517 build backend on the standard library alone, so that `pip install sdks/python` and
`pip wheel sdks/python` work offline: pip's isolated build environment then has nothing to
download (setuptools would have to come from PyPI there). It builds a pure-Python wheel of
`src/svc` (PEP 427), an sdist (PEP 517) and an editable wheel (PEP 660, a `.pth` to `src`).

The project's metadata is read from pyproject.toml's [project] table with a few patterns (the
TOML parser is in the standard library only from 3.11, and the package supports 3.9).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "svc"


def _field(text: str, name: str) -> str:
    match = re.search(rf'^{re.escape(name)}\s*=\s*"([^"]*)"', text, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"pyproject.toml has no [project] {name}")
    return match.group(1)


def _metadata() -> Tuple[str, str, str]:
    """(name, version, METADATA text)."""
    project = (ROOT / "pyproject.toml").read_text("utf-8").split("[project]", 1)[1].split("\n[", 1)[0]
    name, version = _field(project, "name"), _field(project, "version")
    readme = (ROOT / "README.md").read_text("utf-8")
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        f"Summary: {_field(project, 'description')}",
        f"Requires-Python: {_field(project, 'requires-python')}",
        "License: MIT",
        "Classifier: Programming Language :: Python :: 3",
        "Classifier: Typing :: Typed",
        "Description-Content-Type: text/markdown",
    ]
    return name, version, "\n".join(lines) + "\n\n" + readme


def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _files() -> List[Tuple[str, bytes]]:
    """The package's files, as (path in the wheel, bytes), sorted so that builds are reproducible."""
    src = ROOT / "src" / PACKAGE
    out: List[Tuple[str, bytes]] = []
    for path in sorted(src.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".typed"):
            out.append((f"{PACKAGE}/{path.relative_to(src).as_posix()}", path.read_bytes()))
    return out


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _wheel(directory: str, files: List[Tuple[str, bytes]]) -> str:
    name, version, metadata = _metadata()
    dist = _dist(name)
    info = f"{dist}-{version}.dist-info"
    filename = f"{dist}-{version}-py3-none-any.whl"
    entries = files + [
        (f"{info}/METADATA", metadata.encode()),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: svc-backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{info}/top_level.txt", f"{PACKAGE}\n".encode()),
    ]
    record = "\n".join([_record_line(p, d) for p, d in entries] + [f"{info}/RECORD,,", ""])
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in entries + [(f"{info}/RECORD", record.encode())]:
            # A fixed date: the same sources make the same wheel.
            entry = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            entry.external_attr = 0o644 << 16
            wheel.writestr(entry, data, zipfile.ZIP_DEFLATED)
    return filename


Settings = Optional[Mapping[str, object]]


def get_requires_for_build_wheel(config_settings: Settings = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Settings = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Settings = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Settings = None, metadata_directory: Optional[str] = None) -> str:
    return _wheel(wheel_directory, _files())


def build_editable(
    wheel_directory: str, config_settings: Settings = None, metadata_directory: Optional[str] = None
) -> str:
    return _wheel(wheel_directory, [("svc_sdk_editable.pth", f"{ROOT / 'src'}\n".encode())])


def build_sdist(sdist_directory: str, config_settings: Settings = None) -> str:
    name, version, metadata = _metadata()
    base = f"{_dist(name)}-{version}"
    filename = f"{base}.tar.gz"
    members: Dict[str, bytes] = {"PKG-INFO": metadata.encode()}
    for rel in ["pyproject.toml", "README.md", "_build/backend.py"]:
        members[rel] = (ROOT / rel).read_bytes()
    for path, data in _files():
        members[f"src/{path}"] = data
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for rel, data in sorted(members.items()):
            info = tarfile.TarInfo(f"{base}/{rel}")
            info.size, info.mode, info.mtime = len(data), 0o644, 1577836800
            tar.addfile(info, io.BytesIO(data))
    return filename
