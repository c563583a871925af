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
import repo_modules
import torch

REPO = Path(__file__).resolve().parents[2]


def _load_build_tools():
    return repo_modules.load("tools/specops_build.py")


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
    assert '"cpu,ascend"' in info


@pytest.mark.skipif(not _cmake_available(), reason="cmake is installed by `make test`")
def test_cmake_stays_cpu_without_a_toolkit_and_refuses_a_forced_ascend_build(tmp_path):
    result = _configure(tmp_path / "auto", None)
    assert result.returncode == 0, result.stderr
    assert "CPU build (no CANN toolkit)" in result.stdout
    assert 'CANN_VERSION = "" or None' in (tmp_path / "auto" / "build" / "_build_info.py").read_text()
    forced = _configure(tmp_path / "forced", None, option="ON")
    assert forced.returncode != 0
    assert "SPECOPS_ASCEND=ON but no CANN toolkit" in forced.stdout + forced.stderr


def _tool(name: str) -> str:
    """The build tool `make` installs into the environment, else the one on PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else name


PROBE = """
#include <cstdio>
#include "build_facts.h"
int main() {
  namespace facts = specops::build_facts;
  std::printf("%s|%s|%s|%s\\n", facts::kVersion, facts::kBackends, facts::kCannVersion, facts::kTorchVersion);
}
"""


@pytest.mark.skipif(not _cmake_available(), reason="cmake is installed by `make test`")
def test_the_cann_build_compiles_and_links_its_build_facts(tmp_path):
    """The +cann build for real, as far as its flags differ from the CPU build: configure with a
    fake toolkit and Ninja (as scikit-build-core does), compile the file that receives the build
    facts as compile definitions with the exact command the build uses, and link it into a
    program that prints them. (A CMake list in a definition broke every file of this build.)"""
    import pybind11

    root = fake_toolkit(tmp_path / "toolkit", "compiler/version.info", "Version=8.0.RC3\n")
    build = tmp_path / "build"
    env = dict(os.environ, ASCEND_HOME_PATH=str(root))
    version = build_tools.wheel_version(str(root))
    configure = subprocess.run(
        [_tool("cmake"), "-S", str(REPO), "-B", str(build), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}",
         f"-DPython_EXECUTABLE={sys.executable}", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
         "-DCMAKE_BUILD_TYPE=Release", f"-DSKBUILD_PROJECT_VERSION_FULL={version}", "-DSKBUILD_PROJECT_VERSION=0.1.0"],
        env=env, capture_output=True, text=True, timeout=300)
    assert configure.returncode == 0, configure.stderr
    assert "Ascend build for CANN 8.0.RC3" in configure.stdout
    facts = "CMakeFiles/_C.dir/csrc/build_facts.cpp.o"
    compiled = subprocess.run([_tool("ninja"), "-C", str(build), facts], capture_output=True, text=True, timeout=300)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    # Only that file gets the facts: every other file compiles as in the CPU build.
    commands = subprocess.run([_tool("ninja"), "-C", str(build), "-t", "commands", "_C"], capture_output=True,
                              text=True, timeout=60).stdout.splitlines()
    compiles = [c for c in commands if " -c " in c]
    assert len(compiles) > 3
    assert [c for c in compiles if "-DSPECOPS_BACKENDS" in c] == [c for c in compiles if "build_facts.cpp" in c]

    probe = tmp_path / "probe.cpp"
    probe.write_text(PROBE)
    linked = subprocess.run(["c++", "-std=c++17", f"-I{REPO / 'csrc'}", str(probe), str(build / facts), "-o",
                             str(tmp_path / "probe")], capture_output=True, text=True, timeout=300)
    assert linked.returncode == 0, linked.stderr
    printed = subprocess.run([str(tmp_path / "probe")], capture_output=True, text=True, timeout=60).stdout
    assert printed.strip() == f"{version}|cpu,ascend|8.0.RC3|{torch.__version__}"
    assert version == "0.1.0+cann8.0.rc3"


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


def install_into_a_fresh_venv(wheel: Path, folder: Path) -> Path:
    """A throwaway venv holding the wheel; returns its python."""
    venv = folder / "venv"
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
    return python


def test_wheel_installs_into_a_fresh_venv_and_runs_every_backend(wheel, tmp_path):
    python = install_into_a_fresh_venv(wheel, tmp_path)
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


@pytest.mark.parametrize("built,installed,accepted", [
    ("2.13.0+cpu", "2.13.0+cu128", True),
    ("2.13.0+cpu", "2.13.0", True),
    ("2.13.0", "2.13.0+cpu", True),
    ("2.13+cpu", "2.13.0+cu126", True),  # release segments compare zero-padded
    ("2.13.0.dev20250101+cpu", "2.13.0.dev20250101+cu126", True),
    ("2.13.0+cpu", "2.13.1+cpu", False),
    ("2.13.0+cpu", "2.13.0.post1", False),
    ("2.13.0.dev20250101", "2.13.0.dev20250102", False),
    ("2.13.0a0+git1234", "2.13.0a0+gitabcd", True),  # a source build and another of the same release
])
def test_the_loaded_extension_accepts_what_the_wheels_torch_pin_accepts(built, installed, accepted):
    from specops._extension import torch_pin_accepts

    assert torch_pin_accepts(built, installed) == accepted
    # The pin the wheel records, as pip reads it.
    specifiers = pytest.importorskip("packaging.specifiers")
    pin = specifiers.SpecifierSet(f"=={built.split('+')[0]}")
    assert pin.contains(installed, prereleases=True) == accepted


def test_a_torch_with_another_local_label_loads_the_extension(monkeypatch):
    """The load decision itself, against this build's torch: another local label of the same
    release loads, another release does not (and says how to rebuild)."""
    from specops import _extension

    built = _extension.EXTENSION.built_torch_version
    assert built == torch.__version__
    release = built.split("+")[0]
    monkeypatch.setattr(torch, "__version__", f"{release}+cu128")
    assert _extension._load().loaded
    major, minor, patch = (int(part) for part in release.split(".")[:3])
    monkeypatch.setattr(torch, "__version__", f"{major}.{minor}.{patch + 1}+cpu")
    refused = _extension._load()
    assert not refused.loaded and f"built against torch {built}" in refused.error
    assert "pip install scikit-build-core pybind11 cmake ninja" in refused.error


def test_the_rebuild_hint_names_every_build_tool():
    from specops._extension import REBUILD_HINT

    setup, _, install = REBUILD_HINT.partition(" then ")
    assert "pip install scikit-build-core pybind11 cmake ninja" in setup
    assert "pip install --no-build-isolation" in install
    # Every tool the build backend and CMakeLists.txt need is in the hint.
    pyproject = (REPO / "pyproject.toml").read_text()
    for requirement in ("scikit-build-core", "pybind11"):
        assert requirement in pyproject and requirement in setup
    assert "ninja" in setup and "cmake" in setup


CANN_WHEEL_IMPORTS = textwrap.dedent(
    """
    import sys
    import torch, specops
    from specops import _C
    assert specops.__file__.startswith(sys.prefix), specops.__file__
    assert specops.EXTENSION.loaded, specops.EXTENSION.error
    assert _C.cann_version == "8.0.RC3" and specops.EXTENSION.cann_version == "8.0.RC3"
    assert _C.backends == ("cpu", "ascend") == specops.EXTENSION.backends, _C.backends
    out = specops.compute_slot_mapping(torch.tensor([0, 1], dtype=torch.int32), torch.tensor([3]),
                                       torch.tensor([[2]], dtype=torch.int32), 16)
    print("imported", _C.version, out.tolist())
    """
)


@pytest.mark.skipif(os.environ.get("SPECOPS_TEST_CANN_WHEEL") != "1",
                    reason="builds, installs and imports the +cann wheel (a few minutes): `make test-cann-wheel`")
def test_make_wheel_with_a_fake_toolkit_gives_a_cann_wheel_that_installs_and_imports(tmp_path):
    """What a user with a CANN toolkit runs: `make wheel` with ASCEND_HOME_PATH set. The toolkit
    here is a folder with a version file; the wheel must be tagged +cann, install into a fresh
    venv, import, load its extension and say which toolkit it was built for."""
    root = fake_toolkit(tmp_path / "toolkit", "compiler/version.info", "Version=8.0.RC3\n")
    dist = tmp_path / "dist"
    env = dict(os.environ, ASCEND_HOME_PATH=str(root))
    for variable in ("SPECOPS_ASCEND", "SPECOPS_SANITIZE", "MAKEFLAGS"):
        env.pop(variable, None)
    made = subprocess.run(["make", "-C", str(REPO), "wheel", f"WHEEL_DIR={dist}"], env=env, capture_output=True,
                          text=True, timeout=1800)
    assert made.returncode == 0, made.stdout[-4000:] + made.stderr[-4000:]
    (wheel,) = dist.glob("specops-*.whl")
    assert wheel.name.startswith("specops-0.1.0+cann8.0.rc3-"), wheel.name
    python = install_into_a_fresh_venv(wheel, tmp_path)
    result = subprocess.run([str(python), "-c", CANN_WHEEL_IMPORTS], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "imported 0.1.0+cann8.0.rc3 [35]" in result.stdout
