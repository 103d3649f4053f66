"""A user's own top-level `domains` package does not shadow the toolkit's domains."""

from __future__ import annotations

from packaging_helpers import check, run_python

USER_CODE = '''
import importlib

user = importlib.import_module("domains")  # the user's own package, first on sys.path
assert user.OWNER == "user", user.__file__
assert importlib.import_module("domains.graphs").OWNER == "user"

import torch
import pe_toolkit as pet
import pe_toolkit.domains.graphs as graphs
from torch_geometric.data import Data

ring = torch.arange(6)
edges = torch.stack([torch.cat([ring, (ring + 1) % 6]), torch.cat([(ring + 1) % 6, ring])])
data = graphs.RandomWalkPE(walk_length=4)(Data(x=torch.ones(6, 1), edge_index=edges))
assert torch.allclose(data.rw_pe[0], torch.tensor([0.0, 0.5, 0.0, 0.375]))
encoder = pet.get_encoder("rwse", 32, 4, in_features=4)
assert type(encoder).__module__ == "pe_toolkit.domains.graphs.encoders"
assert encoder.embed(torch.zeros(6, 32), data.rw_pe).shape == (6, 32)
print(user.__file__)
'''


def test_user_domains_package_first_on_sys_path(tmp_path):
    project = tmp_path / "user_project"
    (project / "domains" / "graphs").mkdir(parents=True)
    (project / "domains" / "__init__.py").write_text('OWNER = "user"\n')
    (project / "domains" / "graphs" / "__init__.py").write_text('OWNER = "user"\n')
    out = check(run_python(USER_CODE, cwd=project, env={"PYTHONPATH": str(project)}))
    assert out.strip() == str(project / "domains" / "__init__.py")
