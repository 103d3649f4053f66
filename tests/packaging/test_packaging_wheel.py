"""The wheel: only `pe_toolkit/` (domains included), core requirements, extras, entry points, console script."""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging_helpers import REPO

import pe_toolkit as pet
from pe_toolkit.registry import DOMAIN_GROUP, ENCODER_GROUP, list_domains

DOMAINS = ("crossmodal", "detection", "graphs", "multirobot", "music", "recsys", "translation", "vision")


def _working_tree_copy(target: Path) -> Path:
    """The files git tracks or would track (symlinks kept), so the build never writes into the checkout."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source, destination = REPO / name, target / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            destination.symlink_to(source.readlink())
        else:
            shutil.copy2(source, destination)
    return target


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    source = _working_tree_copy(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "--quiet", "-w", str(out), str(source)], check=True, capture_output=True, timeout=300)
    (path,) = out.glob("torch_pe_toolkit-*.whl")
    return zipfile.ZipFile(path)


def _metadata(wheel: zipfile.ZipFile, name: str) -> str:
    (info,) = {n.split("/")[0] for n in wheel.namelist() if n.split("/")[0].endswith(".dist-info")}
    return wheel.read(f"{info}/{name}").decode()


def test_no_file_outside_pe_toolkit(wheel):
    tops = {name.split("/")[0] for name in wheel.namelist()}
    assert tops == {"pe_toolkit", *(t for t in tops if t.startswith("torch_pe_toolkit-") and t.endswith(".dist-info"))}
    assert len(tops) == 2
    assert _metadata(wheel, "top_level.txt").split() == ["pe_toolkit"]


def test_fire_tile_kernel_source_is_in_the_wheel(wheel):
    """FIRE's tile kernel is compiled from its C++ source on first use: the wheel must carry it."""
    from pe_toolkit.encoders.fire_tiles import SOURCE

    assert wheel.read("pe_toolkit/encoders/fire_tiles.cpp") == SOURCE.read_bytes()


def test_domains_are_real_files_under_the_package(wheel):
    names = set(wheel.namelist())
    for domain in DOMAINS:
        assert f"pe_toolkit/domains/{domain}/__init__.py" in names
    assert "pe_toolkit/domains/__init__.py" in names
    assert "pe_toolkit/domains/graphs/transforms.py" in names
    tracked = {p.relative_to(REPO / "domains").as_posix() for p in (REPO / "domains").rglob("*.py")}
    assert {f"pe_toolkit/domains/{p}" for p in tracked} <= names


def test_requirements_of_the_bare_install(wheel):
    message = email.message_from_string(_metadata(wheel, "METADATA"))
    requirements = [Requirement(r) for r in message.get_all("Requires-Dist")]
    bare = {r.name for r in requirements if r.marker is None}
    assert bare == {"torch", "numpy", "jsonargparse", "pyyaml"}  # the last two: the harness's presets
    assert message["Name"] == "torch-pe-toolkit"
    extras = set(message.get_all("Provides-Extra"))
    assert {"train", "plot", "hf", "bench", "docs", "dev", "all", *DOMAINS} <= extras


def test_console_script_and_entry_points_in_the_wheel(wheel):
    text = _metadata(wheel, "entry_points.txt")
    assert "[console_scripts]\npe-toolkit = pe_toolkit.cli:main" in text
    assert f"[{ENCODER_GROUP}]" in text and f"[{DOMAIN_GROUP}]" in text
    assert "rwse = pe_toolkit.domains.graphs:RWSEEncoder" in text


def test_entry_points_list_exactly_the_domain_encoders():
    """Every encoder a domain registers has an entry point naming its class, and nothing else does."""
    declared = {ep.name: ep for ep in entry_points(group=ENCODER_GROUP) if ep.value.startswith("pe_toolkit.")}
    domains = {ep.name: ep.value for ep in entry_points(group=DOMAIN_GROUP) if ep.value.startswith("pe_toolkit.")}
    assert domains == {d: f"pe_toolkit.domains.{d}" for d in DOMAINS}
    assert set(DOMAINS) | {"sequence"} <= set(list_domains())
    registered = {n: pet.encoder_info(n) for d in DOMAINS for n in pet.list_encoders(domain=d)}
    assert set(declared) == set(registered)
    for name, ep in declared.items():
        assert ep.load() is registered[name].cls, name
        assert ep.module == f"pe_toolkit.domains.{registered[name].domain}", name


def test_source_checkout_maps_domains_into_the_package():
    link = REPO / "pe_toolkit" / "domains"
    assert link.is_symlink() and link.readlink() == Path("../domains")
    import pe_toolkit.domains.graphs as graphs

    assert Path(graphs.__file__).resolve() == (REPO / "domains" / "graphs" / "__init__.py").resolve()
