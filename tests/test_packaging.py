"""Packaging (issue 9): version tags, the Ascend detection, the wheel, and the mismatch path."""

from __future__ import annotations

import importlib.util
import os
import site
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def _load_build_tools():
    spec = importlib.util.spec_from_file_location("specops_build", REPO / "tools" / "specops_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_tools = _load_build_tools()


def fake_toolkit(root: Path, relative_path: str, text: str) -> Path:
    """A CANN toolkit tree holding only a version file."""
    path = root / relative_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return root


def test_without_a_toolkit_the_tag_is_cpu(tmp_path):
    assert build_tools.cann_version(None) is None
    assert build_tools.cann_version(str(tmp_path / "missing")) is None
    assert build_tools.cann_version(str(tmp_path)) is None  # a folder with no version file
    assert build_tools.local_version_tag(None) == "cpu"
    assert build_tools.wheel_version(str(tmp_path)) == f"{build_tools.BASE_VERSION}+cpu"


@pytest.mark.parametrize(
    "relative_path,text,version,tag",
    [
        ("compiler/version.info", "Version=8.0.RC2\nversion_dir=8.0.RC2\n", "8.0.RC2", "cann8.0.rc2"),
        ("version.cfg", '# toolkit\nversion="7.0.0.alpha001"\n', "7.0.0.alpha001", "cann7.0.0.alpha001"),
        ("aarch64-linux/ascend_toolkit_install.info", "package_name=Ascend-cann-toolkit\nversion=8.1.RC1\n",
         "8.1.RC1", "cann8.1.rc1"),
    ],
)
def test_fake_toolkit_version_file_gives_the_cann_tag(tmp_path, relative_path, text, version, tag):
    root = fake_toolkit(tmp_path, relative_path, text)
    assert build_tools.cann_version(str(root)) == version
    assert build_tools.local_version_tag(version) == tag
    assert build_tools.wheel_version(str(root)) == f"{build_tools.BASE_VERSION}+{tag}"


def test_local_tag_is_a_valid_pep440_label():
    from packaging.version import Version

    tag = build_tools.local_version_tag("8.0.RC2-beta_1")
    assert Version(f"0.1.0+{tag}").local == tag


def _configure(tmp_path: Path, ascend_home: Path | None, option: str = "AUTO") -> subprocess.CompletedProcess:
    """Configure (never build) the project with CMake, as scikit-build-core would."""
    import pybind11

    env = dict(os.environ)
    env.pop("ASCEND_HOME_PATH", None)
    if ascend_home is not None:
        env["ASCEND_HOME_PATH"] = str(ascend_home)
    command = [
        "cmake", "-S", str(REPO), "-B", str(tmp_path / "build"),
        f"-DPython_EXECUTABLE={sys.executable}", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        f"-DSPECOPS_ASCEND={option}", "-DSKBUILD_PROJECT_VERSION=0.1.0",
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def _cmake_available() -> bool:
    try:
        return subprocess.run(["cmake", "--version"], capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not _cmake_available(), reason="cmake is installed by `make test`")
def test_cmake_turns_the_ascend_build_on_with_a_fake_toolkit(tmp_path):
    root = fake_toolkit(tmp_path / "toolkit", "compiler/version.info", "Version=8.0.RC3\n")
    result = _configure(tmp_path, root)
    assert result.returncode == 0, result.stderr
    assert "Ascend build for CANN 8.0.RC3" in result.stdout
    info = (tmp_path / "build" / "_build_info.py").read_text()
    assert 'CANN_VERSION = "8.0.RC3" or None' in info
    assert '"cpu;ascend"' in info


@pytest.mark.skipif(not _cmake_available(), reason="cmake is installed by `make test`")
def test_cmake_stays_cpu_without_a_toolkit_and_refuses_a_forced_ascend_build(tmp_path):
    result = _configure(tmp_path / "auto", None)
    assert result.returncode == 0, result.stderr
    assert "CPU build (no CANN toolkit)" in result.stdout
    assert 'CANN_VERSION = "" or None' in (tmp_path / "auto" / "build" / "_build_info.py").read_text()
    forced = _configure(tmp_path / "forced", None, option="ON")
    assert forced.returncode != 0
    assert "SPECOPS_ASCEND=ON but no CANN toolkit" in forced.stdout + forced.stderr


RUN_EVERY_BACKEND = textwrap.dedent(
    """
    import os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    import torch, specops
    assert specops.__file__.startswith(sys.prefix), specops.__file__
    query_start_loc = torch.tensor([0, 4], dtype=torch.int32)
    positions = torch.tensor([0, 15, 16, 47])
    block_table = torch.tensor([[5, 6, 7]], dtype=torch.int32)
    for name in specops.available_backends():
        with specops.backend(name):
            out = specops.compute_slot_mapping(query_start_loc, positions, block_table, 16)
        assert out.tolist() == [80, 95, 96, 127], (name, out)
        print("ran", name)
    """
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w", str(out), str(REPO)],
        check=True, timeout=900,
    )
    (path,) = out.glob("specops-*.whl")
    return path


def test_wheel_ships_triton_kernels_inside_specops_and_records_torch(wheel):
    assert "+cpu" in wheel.name or "+cann" in wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
        build_info = archive.read("specops/_build_info.py").decode()
    assert "specops/triton_kernels/__init__.py" in names
    assert "specops/triton_kernels/compute_slot_mapping.py" in names
    assert not any(name.startswith("triton_kernels/") for name in names)
    assert f"Requires-Dist: torch=={torch.__version__.split('+')[0]}" in metadata
    assert f'TORCH_VERSION = "{torch.__version__}"' in build_info


def test_wheel_installs_into_a_fresh_venv_and_runs_every_backend(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, timeout=300)
    # Then the same torch (and Triton) as this environment, without reinstalling gigabytes;
    # it comes after the venv's own site-packages, so the wheel's specops wins.
    venv_site = Path(subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    outer = dict.fromkeys([sysconfig.get_paths()["purelib"], *site.getsitepackages()])
    (venv_site / "outer.pth").write_text("".join(f"{path}\n" for path in outer))
    result = subprocess.run([str(python), "-c", RUN_EVERY_BACKEND], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ran native" in result.stdout and "ran reference" in result.stdout
    if importlib.util.find_spec("triton") is not None:
        assert "ran triton" in result.stdout


MISMATCH = textwrap.dedent(
    """
    import torch
    built_for = torch.__version__
    torch.__version__ = "9.9.9+other"   # as if the installed torch were not the one we built for
    import specops
    from specops.__main__ import environment_report
    assert "native" not in specops.available_backends(), specops.available_backends()
    with specops.backend("reference"):
        specops.compute_slot_mapping(torch.tensor([0, 1], dtype=torch.int32), torch.tensor([3]),
                                     torch.tensor([[2]], dtype=torch.int32), 16)
    try:
        specops.compute_slot_mapping(torch.tensor([0, 1], dtype=torch.int32), torch.tensor([3]),
                                     torch.tensor([[2]], dtype=torch.int32), 16)
    except RuntimeError as error:
        print("ERROR:", error)
    print(environment_report())
    """
)


def test_torch_mismatch_falls_back_and_explains(tmp_path):
    result = subprocess.run([sys.executable, "-c", MISMATCH], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    error = next(line for line in result.stdout.splitlines() if line.startswith("ERROR:"))
    assert f"built against torch {torch.__version__}" in error
    assert "torch 9.9.9+other is installed" in error
    assert "rebuild specops" in error
    report = result.stdout
    assert "loaded           False" in report
    assert f"built for torch  {torch.__version__}" in report
    assert "native           the native extension was built against" in report
