"""`converters/` ships as `irbridge.converters`: in the editable install and in a wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_editable_install_resolves_converters_to_the_top_level_folder() -> None:
    import irbridge.converters

    assert Path(irbridge.converters.__file__).resolve() == ROOT / "converters" / "__init__.py"


def test_wheel_contains_converters_under_irbridge(tmp_path: Path) -> None:
    uv = os.environ.get("UV") or shutil.which("uv")  # `uv run` sets UV to its own binary
    assert uv is not None, "run the tests through `uv run` (see the README's quick start)"
    subprocess.run([uv, "build", "--wheel", "--out-dir", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True)
    [wheel] = tmp_path.glob("irbridge-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "irbridge/converters/__init__.py" in names
    assert "irbridge/_proto/irbridge_pb2.py" in names
    assert not any(n.startswith("converters/") for n in names)
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import irbridge.converters, irbridge.serde; "
            "print(irbridge.converters.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True,
                         capture_output=True, text=True,
                         env={"PYTHONPATH": str(site), "PATH": ""}).stdout
    assert out.strip().startswith(str(site))
