"""Packaging: the numba/llvmlite version check at import, pyproject's pins and metadata, the
LICENSE, and (``PYZYME_BUILD_SMOKE=1``, or CI's .ci/run) a wheel and an sdist that install and
work in a fresh virtual environment."""

import os
import re
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from pyzyme import _version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
needs_checkout = pytest.mark.skipif(not PYPROJECT.exists(), reason="needs the source checkout")


def test_other_numba_is_refused_naming_the_supported_versions(monkeypatch):
    real = _version.installed_version
    monkeypatch.setattr(_version, "installed_version",
                        lambda name: "0.69.0" if name == "numba" else real(name))
    with pytest.raises(ImportError) as info:
        _version.check_dependencies()
    assert isinstance(info.value, _version.DependencyVersionError)
    text = str(info.value)
    assert "supports numba 0.68.x, llvmlite 0.50.x, and found numba 0.69.0" in text
    assert "pip install 'numba==0.68.*' 'llvmlite==0.50.*'" in text
    monkeypatch.setenv(_version.SKIP_CHECK, "1")
    _version.check_dependencies()   # the user asked to try anyway


def test_other_llvmlite_is_refused(monkeypatch):
    monkeypatch.setattr(_version, "installed_version",
                        lambda name: {"numba": "0.68.1", "llvmlite": "0.51.0rc1"}[name])
    with pytest.raises(ImportError, match=r"found llvmlite 0\.51\.0rc1"):
        _version.check_dependencies()
    monkeypatch.setattr(_version, "installed_version", lambda name: "0.68.2"
                        if name == "numba" else "0.50.9")
    _version.check_dependencies()   # any patch release of the supported minor versions


def test_import_pyzyme_stops_at_another_numba():
    """In a fresh interpreter whose package metadata says numba 0.67.0, ``import pyzyme``
    raises the ImportError before it hooks anything."""
    code = ("import importlib.metadata as m\n"
            "real = m.version\n"
            "m.version = lambda n: '0.67.0' if n == 'numba' else real(n)\n"
            "import pyzyme\n")
    env = {k: v for k, v in os.environ.items() if k != _version.SKIP_CHECK}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()
    assert any(ln.startswith("pyzyme._version.DependencyVersionError: pyzyme ")
               and "supports numba 0.68.x, llvmlite 0.50.x, and found numba 0.67.0" in ln
               for ln in last), proc.stderr


@needs_checkout
def test_pyproject_pins_what_pyzyme_checks():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    pins = {re.match(r"[\w-]+", d).group(0): d for d in project["dependencies"]}
    for name, (major, minor) in _version.SUPPORTED.items():
        assert pins[name] == f"{name}>={major}.{minor},<{major}.{minor + 1}", pins[name]
    assert project["version"] == _version.__version__


@needs_checkout
def test_metadata_and_license():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert project["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:5] == ["Apache", "License", "Version", "2.0,", "January"]
    assert "END OF TERMS AND CONDITIONS" in text
    assert project["authors"] and project["classifiers"] and project["urls"]
    for extra in ("c", "test", "bench", "docs"):
        assert extra in project["optional-dependencies"], extra
    assert any(d.startswith("ziglang") for d in project["optional-dependencies"]["c"])


SMOKE = """
import subprocess, sys
import numpy as np
import pyzyme
from pyzyme import Active, Reverse, autodiff
assert pyzyme.__file__.startswith(sys.prefix), pyzyme.__file__
def f(x):
    return x * x * x
assert autodiff(Reverse, f, Active(2.0)) == ((12.0,),)
g = pyzyme.grad(lambda v: np.sum(v ** 3))(np.array([1.0, 2.0]))
assert np.allclose(g, [3.0, 12.0]), g
version = subprocess.run([sys.prefix + "/bin/pyzyme", "--version"], capture_output=True,
                         text=True, check=True).stdout
assert version.startswith("pyzyme " + pyzyme.__version__), version
print("smoke ok")
"""


@needs_checkout
@pytest.mark.skipif(os.environ.get("PYZYME_BUILD_SMOKE") != "1",
                    reason="builds and installs pyzyme twice (a minute or two): set "
                           "PYZYME_BUILD_SMOKE=1 (CI's .ci/run does)")
def test_wheel_and_sdist_install_in_a_fresh_venv(tmp_path):
    """``python -m build`` makes a wheel and an sdist; each, installed in a fresh virtual
    environment (with this environment's numba, llvmlite and numpy, so that nothing is
    downloaded but the build backend), imports and differentiates."""
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
                   check=True, capture_output=True, text=True, timeout=900)
    wheels, sdists = list(dist.glob("pyzyme-*.whl")), list(dist.glob("pyzyme-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(dist.iterdir())
    for kind, artifact in (("wheel", wheels[0]), ("sdist", sdists[0])):
        env = tmp_path / f"venv-{kind}"
        venv.create(env, with_pip=True, system_site_packages=False)
        python = env / "bin" / "python"
        site = subprocess.run([sys.executable, "-c", "import numba, os; "
                               "print(os.path.dirname(os.path.dirname(numba.__file__)))"],
                              capture_output=True, text=True, check=True).stdout.strip()
        # the dependencies from here (nothing to download for them), pyzyme from the artifact:
        # the wheel as it is, the sdist built by pip (its build backend from the index)
        (next((env / "lib").glob("python3*")) / "site-packages" / "deps.pth").write_text(site)
        offline = ["--no-index"] if kind == "wheel" else []
        proc = subprocess.run([python, "-m", "pip", "install", "--no-deps", *offline,
                               str(artifact)], capture_output=True, text=True, timeout=900,
                              check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        proc = subprocess.run([python, "-c", SMOKE], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300, check=False)
        assert proc.returncode == 0 and "smoke ok" in proc.stdout, (kind, proc.stderr)
