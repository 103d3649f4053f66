"""Explainability: position-aware layer-wise relevance propagation (PA-LRP) and baselines.

Bakish et al. 2025, "Revisiting LRP: Positional Attribution as the Missing Ingredient for
Transformer Explainability", arXiv:2506.02138; rules from AttnLRP (Achtibat et al. 2024,
arXiv:2402.05602).

>>> import torch, pe_toolkit as pet
>>> from pe_toolkit.explain import explain
>>> model = pet.Transformer(pet.TransformerConfig(vocab_size=10, dim=16, num_heads=2, num_layers=1)).eval()
>>> attr = explain(model, torch.tensor([[1, 4, 5]]), target=2, dtype=torch.float64, epsilon=0.0)
>>> bool(torch.allclose(attr.total() + attr.total_absorbed(), attr.logit))
True
"""

from pe_toolkit.explain.lrp import SCORE_KINDS, Attribution, check_encoding, check_model, explain
from pe_toolkit.explain.rules import LEDGER_TAGS, RelevanceLedger

__all__ = ["LEDGER_TAGS", "SCORE_KINDS", "Attribution", "RelevanceLedger", "check_encoding", "check_model", "explain"]
