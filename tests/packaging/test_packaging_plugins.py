"""Encoders found without importing their module: entry points, lazy loading, third-party plugins."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint

import pytest
from packaging_helpers import check, run_python

from pe_toolkit import registry
from pe_toolkit.registry import DOMAIN_GROUP, ENCODER_GROUP, encoder_info, get_encoder, list_encoders

PLUGIN_MODULE = '''
"""A third-party package that adds one encoder to pe-toolkit."""
import pe_toolkit as pet


@pet.register_encoder("zz_plugin_window", domain="plugin_demo", relative=True, reference="Plugin 2026, a window")
class PluginWindow(pet.PositionBiasEncoding):
    """-1 per step beyond 2."""

    def position_bias(self, q_pos, k_pos, dtype):
        distance = (k_pos[None, :] - q_pos[:, None]).abs().to(dtype)
        return -(distance - 2).clamp(min=0).expand(1, self.num_heads, -1, -1)
'''

PLUGIN_PYPROJECT = f'''
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "zz-pe-plugin"
version = "0.1"
dependencies = []

[project.entry-points."{ENCODER_GROUP}"]
zz_plugin_window = "zz_pe_plugin:PluginWindow"

[project.entry-points."{DOMAIN_GROUP}"]
plugin_demo = "zz_pe_plugin"
'''


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory):
    """The plugin, pip-installed (offline) into a directory of its own."""
    source = tmp_path_factory.mktemp("plugin_source")
    (source / "zz_pe_plugin").mkdir()
    (source / "zz_pe_plugin" / "__init__.py").write_text(PLUGIN_MODULE)
    (source / "pyproject.toml").write_text(PLUGIN_PYPROJECT)
    site = tmp_path_factory.mktemp("plugin_site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(site), str(source)], check=True, capture_output=True, timeout=300)
    return site


def test_installed_plugin_encoder_is_found_by_name(plugin_site):
    out = check(run_python(textwrap.dedent('''
        import torch, pe_toolkit as pet
        assert "zz_plugin_window" in pet.list_encoders()          # listed from the entry point...
        assert "zz_pe_plugin" not in sys.modules                  # ...without importing the plugin
        assert "plugin_demo" in pet.registry.list_domains()
        enc = pet.get_encoder("zz_plugin_window", 16, 2)          # imported now
        assert type(enc).__module__ == "zz_pe_plugin"
        print(enc.positional_pattern(5)[0, 4].tolist())
        print(pet.list_encoders(domain="plugin_demo"))
        try:
            pet.get_encoder("zz_plugin_windw", 16, 2)
        except ValueError as error:
            print(error)
        layer = pet.MultiHeadAttention(16, 2, causal=True, encoding=enc)
        assert layer(torch.randn(1, 6, 16)).shape == (1, 6, 16)
    '''), env={"PYTHONPATH": str(plugin_site)}))
    pattern, domain, unknown = out.strip().splitlines()
    assert pattern == "[-2.0, -1.0, 0.0, 0.0, 0.0]"   # keys 0..4 seen from query 4: -(|i - j| - 2)+
    assert domain == "['zz_plugin_window']"
    assert unknown.startswith("unknown encoder 'zz_plugin_windw'; did you mean 'zz_plugin_window'?")


def test_plugin_domain_is_loaded_by_list_encoders(plugin_site):
    out = check(run_python(
        "import pe_toolkit as pet\nprint(pet.list_encoders(domain='plugin_demo'), 'zz_pe_plugin' in sys.modules)",
        env={"PYTHONPATH": str(plugin_site)}))
    assert out.strip() == "['zz_plugin_window'] True"


def test_domain_encoders_need_no_import_in_a_fresh_interpreter():
    out = check(run_python(
        "import pe_toolkit as pet\n"
        "assert 'pe_toolkit.domains.graphs' not in sys.modules\n"
        "enc = pet.get_encoder('rwse', 32, 4, in_features=4)\n"
        "loaded = 'pe_toolkit.domains.graphs' in sys.modules, 'pe_toolkit.domains.music' in sys.modules\n"
        "print(type(enc).__name__, *loaded)"
    ))
    assert out.strip() == "RWSEEncoder True False"


# ----------------------------------------------------------------------- simulated entry points
@pytest.fixture
def simulated(monkeypatch, tmp_path):
    """Entry points of this test only; registrations are dropped afterwards."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.syspath_prepend(str(tmp_path))
    points: dict[str, list[EntryPoint]] = {ENCODER_GROUP: [], DOMAIN_GROUP: []}
    monkeypatch.setattr(registry, "entry_points", lambda group: points[group])
    registry.refresh()
    yield tmp_path, points
    for name in [m for m in sys.modules if m.startswith("zz_sim_")]:
        del sys.modules[name]
    registry.refresh()


def test_entry_point_that_does_not_register_is_a_clear_error(simulated):
    where, points = simulated
    (where / "zz_sim_forgetful.py").write_text("import pe_toolkit as pet\nclass Forgot(pet.PositionalEncoding):\n"
                                               "    pass\n")
    points[ENCODER_GROUP].append(EntryPoint("zz_forgot", "zz_sim_forgetful:Forgot", ENCODER_GROUP))
    registry.refresh()
    assert "zz_forgot" in list_encoders()
    with pytest.raises(RuntimeError, match=r"entry point 'zz_forgot' = 'zz_sim_forgetful:Forgot' .* did not register "
                                           r"it as 'zz_forgot'"):
        get_encoder("zz_forgot", 8, 2)


def test_plugin_with_a_missing_dependency_names_the_encoder(simulated):
    where, points = simulated
    (where / "zz_sim_needy.py").write_text("import zz_package_that_is_not_installed\n")
    points[ENCODER_GROUP].append(EntryPoint("zz_needy", "zz_sim_needy:Needy", ENCODER_GROUP))
    registry.refresh()
    with pytest.raises(ImportError, match=r"encoder 'zz_needy' \(zz_sim_needy:Needy\): No module named "
                                          r"'zz_package_that_is_not_installed'") as info:
        encoder_info("zz_needy")
    assert info.value.name == "zz_package_that_is_not_installed"


def test_conflicting_entry_points_are_refused(simulated):
    _, points = simulated
    points[ENCODER_GROUP] += [EntryPoint("zz_twice", "zz_sim_a:A", ENCODER_GROUP),
                              EntryPoint("zz_twice", "zz_sim_b:B", ENCODER_GROUP)]
    registry.refresh()
    with pytest.raises(RuntimeError, match=r"entry point 'zz_twice' of group 'pe_toolkit.encoders' is declared twice: "
                                           r"'zz_sim_a:A' .* and 'zz_sim_b:B'"):
        list_encoders()


def test_domain_of_an_unimported_name_comes_from_the_domain_entry_points(simulated):
    _, points = simulated
    points[DOMAIN_GROUP].append(EntryPoint("zz_dom", "zz_sim_pkg", DOMAIN_GROUP))
    points[ENCODER_GROUP] += [EntryPoint("zz_in_dom", "zz_sim_pkg.encoders:X", ENCODER_GROUP),
                              EntryPoint("zz_alone", "zz_sim_other:Y", ENCODER_GROUP)]
    registry.refresh()
    names = registry.available_names()
    assert names["zz_in_dom"] == "zz_dom" and names["zz_alone"] is None and names["rope"] == "sequence"
    with pytest.raises(ImportError, match=r"domain 'zz_dom' \(zz_sim_pkg\): No module named 'zz_sim_pkg'"):
        list_encoders(domain="zz_dom")


def test_domain_must_be_a_string():
    with pytest.raises(TypeError, match="domain must be a str, got int"):
        list_encoders(domain=3)
