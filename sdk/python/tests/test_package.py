"""The package builds a wheel that carries its type information."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel(tmp_path: Path) -> None:
    # The venv's own setuptools builds it (no build isolation: offline).
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
        env={"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("toolgate_service-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = z.read(meta).decode()
    assert {"toolgate_service/py.typed", "toolgate_service/service.py", "toolgate_service/testing.py"} <= names
    assert not [n for n in names if n.startswith(("tests/", "examples/"))]
    assert "Requires-Python: >=3.11" in metadata
    assert "Requires-Dist: pulsar-client<4,>=3.13.0" in metadata


def test_the_checkouts_package_is_tested() -> None:
    # Not a copy installed in the environment (pyproject: pythonpath).
    import toolgate_service

    assert Path(toolgate_service.__file__).resolve().is_relative_to(ROOT / "src")
