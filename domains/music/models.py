"""A piano-roll Transformer whose positional encoding is chosen by name, and KV-cache generation.

The trunk is the toolkit's :class:`pe_toolkit.Transformer` (causal, feature-in / feature-out). Encoders
with vector positions (``s_ape``, ``s_rpe``, ``ns_rpe``) receive the whole structure tensor ``(B, L, F)``;
every other encoder (``sinusoidal``, ``rope``, ``nope``, ``music_relative``, ...) receives its ``time``
column. Agarwal et al. 2024 (arXiv:2402.13301) use a 2-layer, 4-head decoder; the sizes here are options.

Decoding a step's logits into a step (:func:`decode_step`); a step of a voice is its sounding row and its
onset row (:mod:`pe_toolkit.domains.music.data`):

* ``"voice_top1"`` (default): per voice, the most likely pitch if the probability that the voice sounds
  any note, ``1 - prod_p (1 - p_p)`` under the model's independent cells, is at least ``threshold``; else a
  rest (a chorale voice sings at most one note);
* ``"threshold"``: every cell with probability >= ``threshold``;
* ``"bernoulli"``: every cell sampled independently (``generator`` for reproducibility).

A sounding pitch has an onset where its onset probability is at least ``threshold`` (``"bernoulli"``: a
sample), and always where it did not sound at the previous step (a note cannot continue from silence); an
onset never falls on a silent cell.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

import pe_toolkit as pet
from pe_toolkit.domains.music.data import CHANNELS, split_step_features, step_features, task_features, window_rolls
from pe_toolkit.domains.music.encoders import _check_structure_positions
from pe_toolkit.domains.music.structure import FIELDS, field_index
from pe_toolkit.encoders.base import check_choice, check_float, check_int

__all__ = ["DECODE_MODES", "MusicModelConfig", "PianoRollTransformer", "decode_step", "generate_accompaniment",
           "generate_continuation", "generate_windows"]

DECODE_MODES = ("voice_top1", "threshold", "bernoulli")


@dataclass
class MusicModelConfig:
    """Sizes and encoding of :class:`PianoRollTransformer`.

    Attributes:
        task: ``"next_step"`` or ``"accompaniment"`` (sets the input / output widths).
        encoding: registry name (``"s_ape"``, ``"s_rpe"``, ``"ns_rpe"``, ``"music_relative"``, ``"sinusoidal"``,
            ``"rope"``, ``"nope"``, ...); ``encoding_options`` its options.
        voices: voices of the roll (4 for SATB).
        dim, num_heads, num_layers, mlp_hidden, dropout: trunk sizes.
        share_encoding: one encoding for all layers (default: one per layer, as Music Transformer's
            per-layer relative tables).
        label_inputs: ``{structure field: number of label ids}``: each field's labels (``0 .. ids - 1``) are
            embedded, one learned table per field, and added to the input projection: the labels as input
            features, beside the encoding (a baseline for structure-informed PEs given the same labels).
    """

    task: str = "next_step"
    encoding: str = "s_ape"
    encoding_options: dict[str, Any] = field(default_factory=dict)
    voices: int = 4
    dim: int = 64
    num_heads: int = 4
    num_layers: int = 2
    mlp_hidden: int | None = None
    dropout: float = 0.1
    share_encoding: bool = False
    label_inputs: dict[str, int] = field(default_factory=dict)


class PianoRollTransformer(nn.Module):
    """Linear in -> causal Transformer (positional hooks) -> linear out, on flattened piano-roll steps.

    Shapes: ``forward(x (B, L, in_features), structure (B, L, F), cache=None) -> logits (B, L, out_features)``.
    """

    def __init__(self, config: MusicModelConfig) -> None:
        super().__init__()
        self.config = config
        self.in_features, self.out_features = task_features(config.task, check_int("voices", config.voices))
        self.input = nn.Linear(self.in_features, config.dim)
        for name, ids in config.label_inputs.items():
            field_index(name)
            check_int(f"label_inputs[{name!r}]", ids)
        self.label_inputs = nn.ModuleDict({name: nn.Embedding(ids, config.dim)
                                           for name, ids in config.label_inputs.items()})
        self.trunk = pet.Transformer(pet.TransformerConfig(
            vocab_size=None, dim=config.dim, num_heads=config.num_heads, num_layers=config.num_layers, causal=True,
            encoding=config.encoding, encoding_options=dict(config.encoding_options), mlp_hidden=config.mlp_hidden,
            dropout=config.dropout, share_encoding=config.share_encoding,
        ))
        self.head = nn.Linear(config.dim, self.out_features)
        # Prior initialisation of the output bias (Lin et al. 2017, arXiv:1708.02002): log-odds of one pitch in
        # 128, the base rate of a cell. Without it the blocks first learn the base rate by blowing up the
        # residual stream, which drowns the input and stalls learning for hundreds of steps (measured here).
        nn.init.constant_(self.head.bias, -math.log(127.0))
        self.structured = getattr(self.trunk.encodings[0], "position_vector_dims", 0) == 1

    def positions_for(self, structure: Tensor) -> Tensor:
        """The positions the encoding takes: the structure ``(B, L, F)`` or its ``time`` column ``(B, L)``."""
        if structure.dim() != 3 or structure.shape[-1] != len(FIELDS):
            raise ValueError(f"structure must have shape (B, L, {len(FIELDS)}) (columns {FIELDS}), "
                             f"got {tuple(structure.shape)}")
        return structure if self.structured else structure[..., field_index("time")]

    def new_cache(self) -> list:
        return self.trunk.new_cache()

    def forward(self, x: Tensor, structure: Tensor, *, cache: list | None = None) -> Tensor:
        if not isinstance(x, Tensor) or not x.is_floating_point():
            raise TypeError(f"x must be a float tensor (B, L, {self.in_features}) of step features, got "
                            f"{getattr(x, 'dtype', type(x).__name__)}")
        if x.dim() != 3 or x.shape[-1] != self.in_features:
            raise ValueError(f"x must have shape (B, L, {self.in_features}), got {tuple(x.shape)}")
        _check_structure_positions("structure", structure)
        if structure.shape[:2] != x.shape[:2]:
            raise ValueError(f"structure {tuple(structure.shape)} must match x {tuple(x.shape)} in (B, L)")
        hidden = self.input(x)
        for name, table in self.label_inputs.items():
            labels = structure[..., field_index(name)]
            if labels.numel() and (labels.min() < 0 or labels.max() >= table.num_embeddings):
                raise ValueError(f"structure field {name!r} has labels in [{int(labels.min())}, {int(labels.max())}]; "
                                 f"label_inputs allows 0 .. {table.num_embeddings - 1}")
            hidden = hidden + table(labels)
        hidden = self.trunk.forward_features(hidden, positions=self.positions_for(structure), cache=cache)
        return self.head(hidden)


def decode_step(logits: Tensor, voices: int, *, mode: str = "voice_top1", threshold: float = 0.5,
                previous: Tensor | None = None, generator: torch.Generator | None = None) -> Tensor:
    """Binary step features ``(..., voices * 256)`` from logits ``(..., voices * 256)`` (module docstring).

    Args:
        logits: per voice 128 sounding then 128 onset logits (:func:`~pe_toolkit.domains.music.data.step_features`).
        previous: ``(..., voices, 128)`` the roll of the step before (``None``: silence), which decides where a
            sounding pitch must start a note.
    """
    check_choice("mode", mode, DECODE_MODES)
    check_float("threshold", threshold)
    if logits.shape[-1] != voices * CHANNELS * 128:
        raise ValueError(f"logits must have {voices} x {CHANNELS} x 128 = {voices * CHANNELS * 128} features, "
                         f"got {logits.shape[-1]}")
    frame_logits, onset_logits = split_step_features(logits.float(), voices)  # (..., V, 128) each
    probs, onset_probs = torch.sigmoid(frame_logits), torch.sigmoid(onset_logits)
    if previous is None:
        previous = torch.zeros_like(probs)
    elif previous.shape != probs.shape:
        raise ValueError(f"previous must have shape {tuple(probs.shape)} (..., voices, 128), "
                         f"got {tuple(previous.shape)}")
    if mode == "threshold":
        frame = probs >= threshold
        struck = onset_probs >= threshold
    elif mode == "bernoulli":
        frame = torch.bernoulli(probs, generator=generator).bool()
        struck = torch.bernoulli(onset_probs, generator=generator).bool()
    else:
        best = probs.argmax(-1, keepdim=True)
        # P(voice sounds) = 1 - prod(1 - p), in log space: sum of log1p(-p)
        active = 1 - torch.exp(torch.log1p(-probs.clamp(max=1 - 1e-7)).sum(-1, keepdim=True))
        frame = torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, best, active >= threshold)
        struck = onset_probs >= threshold
    onset = frame & (struck | ~previous.bool())
    return step_features(frame, onset)


@torch.no_grad()
def generate_continuation(model: PianoRollTransformer, prompt: Tensor, structure: Tensor, steps: int, *,
                          prompt_onsets: Tensor | None = None, mode: str = "voice_top1", threshold: float = 0.5,
                          generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Continue a roll step by step with the KV cache (next-step model).

    Args:
        prompt: ``(B, P, V, 128)`` given steps (``P >= 1``).
        structure: ``(B, >= P + steps - 1, F)`` structure of the steps that are fed to the model (the
            structure is given, the notes are generated).
        steps: new steps to generate.
        prompt_onsets: the prompt's note starts (``None``: where its runs of sounding steps start).
    Returns:
        ``(roll, onsets)``, each ``(B, P + steps, V, 128)`` float (prompt followed by the generated steps).
    """
    if model.config.task != "next_step":
        raise ValueError(f"generate_continuation needs a next_step model, got task {model.config.task!r}")
    check_int("steps", steps, minimum=0)
    if prompt.dim() != 4 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must have shape (B, P >= 1, V, 128), got {tuple(prompt.shape)}")
    b, p, v, _ = prompt.shape
    if structure.shape[0] != b or structure.shape[1] < p + steps - 1:
        raise ValueError(f"structure must cover the {p + steps - 1} fed steps of each of {b} sequences, "
                         f"got shape {tuple(structure.shape)}")
    if prompt_onsets is not None and prompt_onsets.shape != prompt.shape:
        raise ValueError(f"prompt_onsets must have the prompt's shape {tuple(prompt.shape)}, "
                         f"got {tuple(prompt_onsets.shape)}")
    was_training = model.training
    model.eval()
    cache = model.new_cache()
    features = step_features(prompt.float(), None if prompt_onsets is None else prompt_onsets.float())
    out = [features]  # (B, P, V * 256)
    logits = model(features, structure[:, :p], cache=cache)[:, -1]
    previous = prompt[:, -1].float()
    for t in range(p, p + steps):
        step = decode_step(logits, v, mode=mode, threshold=threshold, previous=previous, generator=generator)
        out.append(step.unsqueeze(1))
        previous = split_step_features(step, v)[0]
        if t + 1 < p + steps:
            logits = model(step.unsqueeze(1), structure[:, t:t + 1], cache=cache)[:, -1]
    model.train(was_training)
    return split_step_features(torch.cat(out, dim=1), v)


@torch.no_grad()
def generate_accompaniment(model: PianoRollTransformer, melody: Tensor, structure: Tensor, *,
                           melody_onsets: Tensor | None = None, mode: str = "voice_top1", threshold: float = 0.5,
                           generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Generate the lower voices under a given top voice, one step at a time with the KV cache.

    Args:
        melody: ``(B, T, 128)`` the top voice (soprano).
        structure: ``(B, T, F)``.
        melody_onsets: ``(B, T, 128)`` its note starts (``None``: where its runs of sounding steps start, so a
            repeated melody note is one long note; pass :attr:`Piece.onsets` to keep it two).
    Returns:
        ``(roll, onsets)``, each ``(B, T, V, 128)`` float: the melody as voice 0, the generated voices below.
    """
    if model.config.task != "accompaniment":
        raise ValueError(f"generate_accompaniment needs an accompaniment model, got task {model.config.task!r}")
    if melody.dim() != 3 or melody.shape[-1] != 128:
        raise ValueError(f"melody must have shape (B, T, 128), got {tuple(melody.shape)}")
    b, length, _ = melody.shape
    if tuple(structure.shape[:2]) != (b, length):
        raise ValueError(f"structure must have shape ({b}, {length}, F), got {tuple(structure.shape)}")
    if melody_onsets is not None and melody_onsets.shape != melody.shape:
        raise ValueError(f"melody_onsets must have the melody's shape {tuple(melody.shape)}, "
                         f"got {tuple(melody_onsets.shape)}")
    lower_voices = model.config.voices - 1
    given = step_features(melody.float().unsqueeze(2),
                          None if melody_onsets is None else melody_onsets.float().unsqueeze(2))  # (B, T, 256)
    was_training = model.training
    model.eval()
    cache = model.new_cache()
    previous = melody.new_zeros(b, lower_voices * CHANNELS * 128).float()
    steps = []
    for t in range(length):
        x = torch.cat([given[:, t], previous], dim=-1).unsqueeze(1)
        logits = model(x, structure[:, t:t + 1], cache=cache)[:, -1]
        previous = decode_step(logits, lower_voices, mode=mode, threshold=threshold,
                               previous=split_step_features(previous, lower_voices)[0], generator=generator)
        steps.append(previous)
    model.train(was_training)
    lower_roll, lower_onsets = split_step_features(torch.stack(steps, dim=1), lower_voices)  # (B, T, V-1, 128)
    top_roll, top_onsets = split_step_features(given, 1)
    return torch.cat([top_roll, lower_roll], dim=2), torch.cat([top_onsets, lower_onsets], dim=2)


@torch.no_grad()
def generate_windows(model: PianoRollTransformer, batch: Mapping[str, Tensor], *, prompt: int | None = None,
                     mode: str = "voice_top1", threshold: float = 0.5,
                     generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Generate what the model's task asks for a batch of task windows (stacked :class:`WindowDataset` items).

    ``"next_step"``: continue each window's first ``prompt`` steps (and their onsets) to the window's end
    (:func:`generate_continuation`); ``"accompaniment"``: the lower voices under each window's top voice and its
    onsets (:func:`generate_accompaniment`). Only the reference's given part reaches the model.

    Args:
        batch: ``{"inputs": (B, L, in_features), "targets": (B, L, out_features), "structure": (B, L, F)}``.
        prompt: ``"next_step"`` only: the given steps, ``1 <= prompt <= L + 1``.
    Returns:
        ``(roll, onsets)``, each ``(B, T, V, 128)`` float on the model's device, laid out like the reference
        :func:`~pe_toolkit.domains.music.data.window_rolls` of the batch (``T = L + 1`` for ``"next_step"``).
    """
    task, voices = model.config.task, model.config.voices
    device = next(model.parameters()).device
    roll, onsets = window_rolls(task, batch["inputs"].to(device), batch["targets"].to(device), voices)
    structure = batch["structure"].to(device)
    if task == "accompaniment":
        if prompt is not None:
            raise ValueError(f"prompt is for next_step models; an accompaniment model is given the top voice, "
                             f"got prompt={prompt!r}")
        return generate_accompaniment(model, roll[:, :, 0], structure, melody_onsets=onsets[:, :, 0], mode=mode,
                                      threshold=threshold, generator=generator)
    if prompt is None:
        raise ValueError("a next_step model needs prompt, the number of given steps")
    if check_int("prompt", prompt) > roll.shape[1]:
        raise ValueError(f"prompt must be at most the window's {roll.shape[1]} steps, got {prompt}")
    return generate_continuation(model, roll[:, :prompt], structure, roll.shape[1] - prompt,
                                 prompt_onsets=onsets[:, :prompt], mode=mode, threshold=threshold,
                                 generator=generator)
