"""memgate through DeerFlow's own extension manager, the RFC's installation
path: ``deerflow extensions install SOURCE`` (what ``make
extension-install`` runs) with SOURCE the unpacked maturin sdist (a
self-contained directory: the Python package, the extension crate and the
memgate crates it uses), in a copy of DeerFlow's checkout.

What this machine allows is pinned, not assumed: the manager reads the
entry point, snapshots the source, then runs ``uv add`` (a re-lock). Here
that re-lock fails because the package registry does not serve
``tenki-sandbox`` (pulled in by ``deerflow-harness[tenki]``, already in
DeerFlow's lock); the manager then rolls back, leaving ``pyproject.toml``,
``uv.lock`` and ``config.yaml`` as they were. Where the registry serves it,
the same test checks instead that the package survives ``uv sync --locked``
(DeerFlow's ``make install``) and that the Gateway imports memgate.

The snapshot itself is built the way ``uv sync`` would build it (maturin
as the PEP 517 backend), so the step Docker's builder stage runs is checked
as far as it can run here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEERFLOW_ROOT

SOURCE = os.environ.get("MEMGATE_DEERFLOW_SOURCE")
UV = os.environ.get("MEMGATE_DEERFLOW_UV")
REGISTRY_GAP = "tenki-sandbox"

needs_source = pytest.mark.skipif(
    not (SOURCE and UV), reason="MEMGATE_DEERFLOW_SOURCE / MEMGATE_DEERFLOW_UV unset (testkit/run-tests sets them)"
)


def uv(args, cwd, timeout=600):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_PROJECT", "UV_PYTHON"))}
    # The manager runs `uv` from PATH, as `make extension-install` does.
    env.update(UV_PYTHON_DOWNLOADS="never", UV_NO_PROGRESS="1", PATH=f"{Path(UV).parent}{os.pathsep}{env.get('PATH', '')}")
    return subprocess.run([UV, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """A scratch copy of DeerFlow's checkout (no .venv: uv builds one from
    its cache) with a ``config.yaml`` from the example, as the manager needs."""
    root = tmp_path_factory.mktemp("deerflow") / "deer-flow"
    shutil.copytree(DEERFLOW_ROOT, root, ignore=shutil.ignore_patterns(".venv", "__pycache__", ".deer-flow"))
    shutil.copy(root / "config.example.yaml", root / "config.yaml")
    return root


@needs_source
def test_the_sdist_is_a_snapshot_deerflows_manager_accepts():
    """One ``deerflow.extensions`` entry point, no symlinks, no credential-like files."""
    sys.path.insert(0, str(DEERFLOW_ROOT / "backend" / "packages" / "harness"))
    from deerflow.extensions.manager import _read_local_extension_metadata, _validate_local_snapshot

    _validate_local_snapshot(Path(SOURCE))
    assert _read_local_extension_metadata(Path(SOURCE)) == ("memgate", "memgate", "memgate.deerflow:install")


@needs_source
def test_extension_manager_install_then_locked_sync(checkout):
    backend = checkout / "backend"
    before = {name: (backend / name).read_bytes() for name in ("pyproject.toml", "uv.lock")}
    config_before = (checkout / "config.yaml").read_bytes()
    result = uv(
        ["run", "--frozen", "--no-group", "extensions", "deerflow", "extensions", "install", "--yes", SOURCE],
        backend,
        timeout=1200,
    )
    output = result.stdout + result.stderr
    print(output[-3000:])
    if result.returncode != 0:
        # Pinned registry gap: the re-lock needs a package this registry lacks.
        assert REGISTRY_GAP in output, f"install failed for another reason:\n{output[-3000:]}"
        assert "entry point" not in output.lower(), "memgate's metadata was refused"
        for name, content in before.items():
            assert (backend / name).read_bytes() == content, f"{name} was not rolled back"
        assert (checkout / "config.yaml").read_bytes() == config_before
        assert not (backend / "extensions" / "sources" / "memgate").exists(), "snapshot left behind"
        pytest.xfail(f"registry gap: uv add re-locks DeerFlow and needs {REGISTRY_GAP}, which this registry does not serve")
    # Where the registry allows it: locked, snapshotted, enabled, and it survives DeerFlow's own sync.
    assert b"memgate" in (backend / "uv.lock").read_bytes()
    assert (backend / "extensions" / "sources" / "memgate" / "pyproject.toml").is_file()
    assert "memgate.deerflow:install" in (checkout / "config.yaml").read_text()
    synced = uv(["sync", "--locked"], backend, timeout=1200)
    assert synced.returncode == 0, synced.stderr[-3000:]
    imported = subprocess.run(
        [str(backend / ".venv" / "bin" / "python"), "-c", "import memgate.deerflow, app.gateway.app; print('ok')"],
        cwd=backend, env=dict(os.environ, PYTHONPATH="."), capture_output=True, text=True, timeout=300,
    )
    assert imported.returncode == 0 and imported.stdout.strip().endswith("ok"), imported.stderr[-3000:]


@needs_source
def test_the_snapshot_builds_with_maturin_as_uv_sync_would(tmp_path):
    """``uv build --wheel`` on the snapshot directory: the PEP 517 build
    ``uv sync`` runs for a managed source (maturin from PyPI, crates from
    crates.io, a Rust toolchain on PATH)."""
    snapshot = tmp_path / "memgate"
    shutil.copytree(SOURCE, snapshot)
    built = uv(["build", "--wheel", "--out-dir", str(tmp_path / "wheels"), str(snapshot)], tmp_path, timeout=1800)
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    wheels = list((tmp_path / "wheels").glob("memgate-*.whl"))
    assert len(wheels) == 1, wheels
    import zipfile

    names = zipfile.ZipFile(wheels[0]).namelist()
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheels[0]).read(entry_points).decode()
    lines = [line.replace(" ", "") for line in text.splitlines()]
    assert lines[lines.index("[deerflow.extensions]") + 1] == "memgate=memgate.deerflow:install", text
