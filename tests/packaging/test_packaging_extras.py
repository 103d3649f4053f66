"""Core-only install and extras: what `import pe_toolkit` needs, and the error when an extra is missing."""

from __future__ import annotations

import re

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging_helpers import HEAVY, REPO, check, run_python

from pe_toolkit import extras
from pe_toolkit.extras import DISTRIBUTION, EXTRAS, install_command, missing_modules, require_extra

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
OPTIONAL = PYPROJECT["project"]["optional-dependencies"]


def _names(requirements: list[str]) -> set[str]:
    return {Requirement(r).name.lower().replace("_", "-") for r in requirements}


def _extra_closure(extra: str) -> set[str]:
    """Distributions an extra installs, following `torch-pe-toolkit[...]` self-references."""
    found: set[str] = set()
    for text in OPTIONAL[extra]:
        requirement = Requirement(text)
        if requirement.name == DISTRIBUTION:
            for inner in requirement.extras:
                found |= _extra_closure(inner)
        else:
            found.add(requirement.name.lower().replace("_", "-"))
    return found


# ------------------------------------------------------------------------------ the declared lists
def test_core_dependencies_are_torch_numpy_and_the_preset_readers():
    assert PYPROJECT["project"]["name"] == DISTRIBUTION == "torch-pe-toolkit"
    # jsonargparse + PyYAML: the benchmark harness's presets (pe_toolkit.bench.config), imported only when it runs
    assert _names(PYPROJECT["project"]["dependencies"]) == {"torch", "numpy", "jsonargparse", "pyyaml"}


def test_every_extra_of_the_issue_exists():
    assert {"train", "graphs", "music", "recsys", "detection", "multirobot", "crossmodal", "translation", "hf",
            "bench", "docs", "dev", "all", "plot"} <= set(OPTIONAL)


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_extras_table_matches_pyproject(extra):
    """`pe_toolkit.extras.EXTRAS` (what the error messages name) lists exactly what pyproject installs."""
    assert _names(OPTIONAL[extra]) == set(EXTRAS[extra].values())


def test_all_installs_every_extra():
    assert set().union(*(_extra_closure(e) for e in OPTIONAL if e != "all")) == _extra_closure("all")
    heavy_of_the_issue = {"lightning", "torch-geometric", "pretty-midi", "matplotlib", "music21", "jsonargparse",
                          "torchmetrics", "networkx"}
    assert heavy_of_the_issue <= _extra_closure("all")


# ------------------------------------------------------------------------------ the error message
def test_install_command():
    assert install_command("graphs") == "pip install 'torch-pe-toolkit[graphs]'"
    assert install_command("graphs", "train") == "pip install 'torch-pe-toolkit[graphs,train]'"
    assert install_command() == "pip install torch-pe-toolkit"
    with pytest.raises(ValueError, match=r"unknown extra\(s\) \['graph'\]; known: train, plot, graphs"):
        install_command("graph")


def test_require_extra_names_the_package_and_the_command(monkeypatch):
    monkeypatch.setattr(extras, "EXTRAS", {"fake": {"math": "math", "zz_not_a_module": "zz-dist"}})
    assert missing_modules("fake") == ["zz_not_a_module"]
    with pytest.raises(ImportError) as info:
        require_extra("fake", "somewhere.module")
    assert str(info.value) == ("somewhere.module needs zz-dist, which is not installed; install the 'fake' extra: "
                               "pip install 'torch-pe-toolkit[fake]'")
    assert info.value.name == "zz_not_a_module"


def test_require_extra_with_everything_installed_and_unknown_extra():
    for extra in EXTRAS:  # `make test` installs `.[all]`
        require_extra(extra, "test")
    with pytest.raises(ValueError, match="unknown extra 'nope'"):
        require_extra("nope", "test")


# ------------------------------------------------------------------------------ a bare install
def test_import_pe_toolkit_loads_no_optional_package():
    """Beyond what `import torch` itself loads (torch.hub imports tqdm when it is there)."""
    out = check(run_python(
        "import torch\nbefore = set(sys.modules)\n"
        "import pe_toolkit, pe_toolkit.tasks, pe_toolkit.conversion, pe_toolkit.explain, pe_toolkit.data\n"
        f"print(sorted({{m.split('.')[0] for m in set(sys.modules) - before}} & set({HEAVY!r})))"
    ))
    assert out.strip() == "[]"


def test_core_works_with_every_optional_package_missing():
    """What a `pip install torch-pe-toolkit` user has: torch and numpy only (the issue's 'done when' line)."""
    out = check(run_python(
        "import torch, pe_toolkit as pet\n"
        "pet.MultiHeadAttention(64, 4, encoding=pet.get_encoder('rope', 64, 4))\n"
        "attn = pet.MultiHeadAttention(64, 4, num_kv_heads=2, causal=True, encoding=pet.get_encoder('rope', 64, 4))\n"
        "assert attn(torch.randn(2, 5, 64)).shape == (2, 5, 64)\n"
        "model = pet.Transformer(pet.TransformerConfig(vocab_size=50, dim=32, num_heads=4, num_layers=2,\n"
        "                                              causal=True, encoding='alibi'))\n"
        "assert model.generate(torch.randint(0, 50, (1, 4)), max_new_tokens=3).shape == (1, 7)\n"
        "import pe_toolkit.tasks, pe_toolkit.conversion, pe_toolkit.explain\n"
        "names = pet.list_encoders()\n"
        "assert 'rwse' in names and 's_ape' in names, names  # listed from entry points, nothing imported\n"
        "print(len(names))\n",
        hide=HEAVY,
    ))
    assert int(out) >= 31


# import name hidden, module whose import must fail, extra named in the message
MISSING_EXTRA_CASES = [
    ("lightning", "import pe_toolkit.training", "pe_toolkit.training", "train"),
    ("jsonargparse", "import pe_toolkit.training.cli", "pe_toolkit.training", "train"),
    ("lightning", "from pe_toolkit.data import ByteLMDataModule", "pe_toolkit.data.byte_lm", "train"),
    ("matplotlib", "import pe_toolkit.plotting", "pe_toolkit.plotting", "plot"),
    ("torch_geometric", "import pe_toolkit.domains.graphs", "pe_toolkit.domains.graphs", "graphs"),
    ("scipy", "import pe_toolkit.domains.graphs.transforms", "pe_toolkit.domains.graphs", "graphs"),
    ("pretty_midi", "import pe_toolkit.domains.music", "pe_toolkit.domains.music", "music"),
    ("music21", "from pe_toolkit.domains.music import load_bach_chorales", "pe_toolkit.domains.music", "music"),
    ("pycocotools", "import pe_toolkit.domains.detection", "pe_toolkit.domains.detection", "detection"),
    ("scipy", "import pe_toolkit.domains.multirobot", "pe_toolkit.domains.multirobot", "multirobot"),
    ("sacrebleu", "import pe_toolkit.domains.translation", "pe_toolkit.domains.translation", "translation"),
    ("lightning", "import pe_toolkit.domains.recsys.lightning_module", "pe_toolkit.domains.recsys.lightning_module",
     "train"),
    ("lightning", "import pe_toolkit.domains.crossmodal.lightning_module",
     "pe_toolkit.domains.crossmodal.lightning_module", "train"),
    ("lightning", "import pe_toolkit.domains.multirobot.data", "pe_toolkit.domains.multirobot.data", "train"),
    ("transformers", "import pe_toolkit.integrations.hf", "pe_toolkit.integrations.hf", "hf"),
    ("scipy", "from pe_toolkit.bench.verdict import decide_claim; decide_claim([2, 3], [0, 1], higher_is_better=True)",
     "pe_toolkit.bench.verdict", "stats"),
    ("scipy", "from pe_toolkit.bench.summary import summarize_groups; summarize_groups([{'m': 'a', 'x': 1.0}, "
     "{'m': 'a', 'x': 2.0}], ('m',), ['x'])", "pe_toolkit.bench.verdict", "stats"),
]


@pytest.mark.parametrize(("hidden", "statement", "module", "extra"), MISSING_EXTRA_CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in MISSING_EXTRA_CASES])
def test_missing_extra_is_an_import_error_with_the_pip_command(hidden, statement, module, extra):
    result = run_python(
        f"try:\n    {statement}\nexcept ImportError as error:\n"
        "    print(type(error).__name__, error.name, '|', error)\nelse:\n    print('imported')\n",
        hide=(hidden,),
    )
    out = check(result).strip()
    kind, _, message = out.partition(" | ")
    assert kind == f"ImportError {hidden}", out  # not a bare ModuleNotFoundError from deep inside
    distribution = EXTRAS[extra][hidden]
    assert message == (f"{module} needs {distribution}, which is not installed; install the '{extra}' extra: "
                       f"pip install 'torch-pe-toolkit[{extra}]'"), message


def test_domain_encoder_whose_extra_is_missing_says_which_extra():
    out = check(run_python(
        "import pe_toolkit as pet\n"
        "for call in (lambda: pet.get_encoder('rwse', 32, 4, in_features=4), lambda: pet.encoder_info('lap_pe'),\n"
        "             lambda: pet.list_encoders(domain='graphs')):\n"
        "    try:\n        call()\n    except ImportError as error:\n        print(error)\n",
        hide=("torch_geometric",),
    ))
    lines = out.strip().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("encoder 'rwse' (pe_toolkit.domains.graphs:RWSEEncoder): ")
    assert lines[1].startswith("encoder 'lap_pe' (pe_toolkit.domains.graphs:LapPEEncoder): ")
    assert lines[2].startswith("domain 'graphs' (pe_toolkit.domains.graphs): ")
    assert all(re.search(r"needs torch-geometric, which is not installed; install the 'graphs' extra: "
                         r"pip install 'torch-pe-toolkit\[graphs\]'$", line) for line in lines)


@pytest.mark.parametrize("extra", sorted(OPTIONAL))
def test_readme_extras_table_names_every_extra(extra):
    readme = (REPO / "README.md").read_text()
    row = next((line for line in readme.splitlines() if line.startswith(f"| `{extra}` |")), None)
    assert row is not None, f"README's extras table has no row for {extra!r}"
    if extra in EXTRAS:
        assert all(distribution in row for distribution in EXTRAS[extra].values()), row
