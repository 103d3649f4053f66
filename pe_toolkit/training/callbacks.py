"""Lightning callbacks: the Q/K learning-rate rule, max-logit monitoring, and a training-loss history.

* :class:`QKLearningRateCallback` attaches :class:`~pe_toolkit.training.qk_learning_rate.QKLearningRateRule`
  (Anson & Aitchison 2025, arXiv:2511.21377) to the trainer's optimizers.
* :class:`QKClipCallback` applies QK-clip (Kimi K2's MuonClip, arXiv:2507.20534) after every
  optimizer step: per head, query/key weights rescaled so the largest logit is at most ``tau``.
* :class:`AttentionLogitMonitor` logs the largest attention logit of every self-attention layer,
  the quantity whose growth signals instability (Dehghani et al. 2023, arXiv:2302.05442; Wortsman
  et al. 2023, "Small-scale proxies for large-scale Transformer training instabilities",
  arXiv:2309.14322).
* :class:`LossHistory` keeps the mean training loss of every window of steps, so a run's record shows
  whether (and when) it learned, and optionally prints it as the run goes.
* :class:`FitClock` measures the wall time of a fit across interruptions: checkpoints carry it.
* :class:`NonFiniteStop` stops a fit whose loss or weights become NaN or inf and names the step.
* :class:`ValidationErrorCurve` records the validation exact-match error and can stop below a target.

Both keep their state in checkpoints, so a fit resumed with ``ckpt_path`` continues them.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

import lightning as L
import torch
from torch import Tensor

from pe_toolkit.encoders.base import check_int
from pe_toolkit.nn.attention import MultiHeadAttention
from pe_toolkit.nn.latent_attention import MultiHeadLatentAttention
from pe_toolkit.training.qk_clip import (
    QK_CLIP_MEASURES,
    attention_layers,
    check_clippable,
    check_tau,
    head_max_logits,
    qk_clip_,
)
from pe_toolkit.training.qk_learning_rate import QKLearningRateRule


class QKLearningRateCallback(L.Callback):
    """Apply the Q/K learning-rate rule to every optimizer of the fit.

    Args:
        **options: :class:`QKLearningRateRule` options (``norm``, ``granularity``, ``reference``, ``every``,
            ``factors``).

    After fitting, :attr:`rule` holds the rule (``rule.multipliers``: the last multipliers). The
    multipliers are logged as ``qk_lr/<pair>.<query|key>`` (the mean over heads) every
    ``log_every_n_steps``.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__()
        unknown = sorted(set(options) - {"norm", "granularity", "reference", "every", "factors"})
        if unknown:
            raise TypeError(f"QKLearningRateCallback: unknown option(s) {unknown}; allowed: norm, granularity, "
                            "reference, every, factors")
        self.options = options
        self.rule: QKLearningRateRule | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.rule = QKLearningRateRule(pl_module, **self.options)
        if not trainer.optimizers:
            raise ValueError("QKLearningRateCallback: the trainer has no optimizer")
        for optimizer in trainer.optimizers:
            self.rule.attach(optimizer)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if self.rule is None or not self.rule.multipliers:
            return
        if trainer.global_step % max(trainer.log_every_n_steps, 1) == 0:
            for name, value in self.rule.multipliers.items():
                pl_module.log(f"qk_lr/{name}", float(value.mean()))

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.rule is not None:
            self.rule.detach()


class QKClipCallback(L.Callback):
    """QK-clip after every optimizer step (Kimi K2, arXiv:2507.20534; :mod:`pe_toolkit.training.qk_clip`).

    During each training forward a pre-hook on every self-attention layer records the layer's input
    and (``measure="forward"``, K2) its per-head largest logit ``S_max^h``; a post-step hook on each
    optimizer then rescales the heads with ``S_max^h > tau`` (``measure="after_step"`` recomputes
    ``S_max^h`` on the recorded inputs with the updated weights first). Calls with a KV cache or a
    context (cross-attention) are not recorded.

    Args:
        tau: the logit threshold (> 0; K2 uses 100).
        measure: ``"forward"`` or ``"after_step"``.

    Attributes:
        clipped: heads rescaled, summed over steps and layers (logged as ``qk_clip/heads``, with
            ``qk_clip/min_gamma``).
        history: ``(optimizer step, number of heads clipped, smallest gamma)`` for every step that
            clipped.
        steps: optimizer steps seen.
    """

    def __init__(self, tau: float = 100.0, *, measure: str = "forward") -> None:
        super().__init__()
        self.tau = check_tau(tau)
        if measure not in QK_CLIP_MEASURES:
            raise ValueError(f"measure must be one of {QK_CLIP_MEASURES}, got {measure!r}")
        self.measure = measure
        self.clipped = 0
        self.steps = 0
        self.history: list[tuple[int, int, float]] = []
        self._layers: list[torch.nn.Module] = []
        self._captured: dict[int, tuple[Tensor, Tensor | None]] = {}  # layer -> (max logits or input, q_pos)
        self._kwargs: dict[int, dict[str, Any]] = {}
        self._hooks: list[Any] = []
        self._step_hooks: list[Any] = []
        self._last: tuple[int, float] = (0, 1.0)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._layers = attention_layers(pl_module)
        if not self._layers:
            raise ValueError("QKClipCallback: the module has no MultiHeadAttention / MultiHeadLatentAttention layer")
        for i, layer in enumerate(self._layers):
            check_clippable(layer, f"attention layer {i}")
        if not trainer.optimizers:
            raise ValueError("QKClipCallback: the trainer has no optimizer")
        self._step_hooks = [opt.register_step_post_hook(self._after_step) for opt in trainer.optimizers]

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        self._remove_hooks()

        def capture(index: int):
            def hook(module, args, kwargs):
                context = args[1] if len(args) > 1 else kwargs.get("context")
                if context is not None or kwargs.get("cache") is not None:
                    return
                x = args[0].detach()
                options = {"q_pos": kwargs.get("q_pos"), "encoding": kwargs.get("encoding")}
                if self.measure == "forward":  # several forwards per step (accumulation): the max over them
                    value = head_max_logits(module, x, **options)
                    previous = self._captured.get(index)
                    self._captured[index] = value if previous is None else torch.maximum(previous, value)
                else:
                    self._captured[index] = x
                self._kwargs[index] = options
            return hook

        self._hooks = [layer.register_forward_pre_hook(capture(i), with_kwargs=True)
                       for i, layer in enumerate(self._layers)]

    @torch.no_grad()
    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.steps += 1
        heads, smallest = 0, 1.0
        for index, value in sorted(self._captured.items()):
            layer = self._layers[index]
            if self.measure == "after_step":
                value = head_max_logits(layer, value, **self._kwargs[index])
            gamma = qk_clip_(layer, value, self.tau)
            heads += int((gamma < 1).sum())
            smallest = min(smallest, float(gamma.min()))
        self._captured, self._kwargs = {}, {}
        self._last = (heads, smallest)
        if heads:
            self.clipped += heads
            self.history.append((self.steps - 1, heads, smallest))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        self._remove_hooks()
        if trainer.global_step % max(trainer.log_every_n_steps, 1) == 0:
            pl_module.log("qk_clip/heads", float(self._last[0]))
            pl_module.log("qk_clip/min_gamma", self._last[1])

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._remove_hooks()
        for handle in self._step_hooks:
            handle.remove()
        self._step_hooks = []

    def _remove_hooks(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []


def max_attention_logit(layer: torch.nn.Module, x: Tensor, kwargs: dict[str, Any]) -> float:
    """Largest visible scaled logit of a self-attention layer (MHA or MLA) for its input ``x (B, L, dim)``."""
    with torch.no_grad():
        logits = layer.attention_logits(x, q_pos=kwargs.get("q_pos"), encoding=kwargs.get("encoding"))
    return float(logits.amax())  # masked entries are -inf


class AttentionLogitMonitor(L.Callback):
    """Log the largest attention logit of each self-attention layer every ``every_n_steps`` steps.

    During the training forward of a measured step, a pre-hook on each layer recomputes its logits
    from the layer's input without autograd (:meth:`MultiHeadAttention.attention_logits`,
    :meth:`MultiHeadLatentAttention.attention_logits`), with the weights of that forward (before
    the optimizer step); no extra model forward is run. Logged as ``attn_max_logit/layer_<i>``;
    :attr:`history` keeps ``(global_step, [max logit per layer])``. Cross-attention layers and calls
    with a KV cache are skipped.

    Args:
        every_n_steps: how often to measure (>= 1).
    """

    def __init__(self, every_n_steps: int = 10) -> None:
        super().__init__()
        self.every_n_steps = check_int("every_n_steps", every_n_steps)
        self.history: list[tuple[int, list[float]]] = []
        self._values: dict[int, float] = {}
        self._hooks: list[Any] = []

    def _layers(self, pl_module: L.LightningModule) -> list[torch.nn.Module]:
        return [m for m in pl_module.modules() if isinstance(m, (MultiHeadAttention, MultiHeadLatentAttention))]

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if trainer.global_step % self.every_n_steps:
            return
        self._values = {}

        def capture(index: int):
            def hook(module, args, kwargs):
                context = args[1] if len(args) > 1 else kwargs.get("context")
                if context is None and kwargs.get("cache") is None:
                    self._values[index] = max_attention_logit(module, args[0].detach(), kwargs)
            return hook

        layers = self._layers(pl_module)
        self._hooks = [layer.register_forward_pre_hook(capture(i), with_kwargs=True) for i, layer in enumerate(layers)]

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if not self._values:
            return
        values = [value for _, value in sorted(self._values.items())]
        self._values = {}
        step = trainer.global_step - 1  # the step whose forward was captured (global_step already advanced)
        self.history.append((step, values))
        for i, value in enumerate(values):
            pl_module.log(f"attn_max_logit/layer_{i}", value)


class LossHistory(L.Callback):
    """Mean training loss over each window of ``every_n_steps`` training steps.

    :attr:`history` holds ``(trainer.global_step at the window's end, mean loss of its steps)``, one
    entry per full window (a last partial window is added at the end of the fit). A step whose
    ``training_step`` returned ``None`` has no loss and is not counted in any window. With ``stream`` set (e.g.
    ``sys.stderr``), each entry is also printed there as ``"<label> step S/T: loss X"``.

    Args:
        every_n_steps: window length (>= 1).
        label: prefix of the printed lines.
        stream: where to print each window's mean; ``None`` prints nothing.
    """

    def __init__(self, every_n_steps: int = 100, label: str = "train", stream: TextIO | None = None) -> None:
        super().__init__()
        self.every_n_steps = check_int("every_n_steps", every_n_steps)
        self.label = label
        self.stream = stream
        self.history: list[tuple[int, float]] = []
        self._window: list[float] = []

    def state_dict(self) -> dict[str, Any]:
        return {"history": [list(entry) for entry in self.history], "window": list(self._window)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = [(int(step), float(mean)) for step, mean in state_dict["history"]]
        self._window = [float(loss) for loss in state_dict["window"]]

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, *args: Any) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is None:  # training_step returned None: Lightning skipped the step (outputs is then {})
            return
        self._window.append(float(loss))
        if len(self._window) == self.every_n_steps:
            self._flush(trainer)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._window:
            self._flush(trainer)

    def _flush(self, trainer: L.Trainer) -> None:
        mean = sum(self._window) / len(self._window)
        self._window = []
        step = trainer.global_step  # steps done so far (already advanced past this batch)
        self.history.append((step, mean))
        if self.stream is not None:
            total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else "?"
            print(f"{self.label} step {step}/{total}: loss {mean:.4f}", file=self.stream, flush=True)


class FitClock(L.Callback):
    """Wall-clock seconds spent in ``trainer.fit``, summed over a fit and its resumptions.

    :attr:`resumed_seconds` is the fit time recorded in the checkpoint a resumed fit starts from (0 for
    a fresh fit); after the fit, :attr:`seconds` is that plus this fit's time. Time after the last
    checkpoint of an interrupted fit is not counted: the resumed fit redoes that work and counts it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.resumed_seconds = 0.0
        self.seconds = 0.0
        self._start: float | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.seconds = self._elapsed()
        self._start = None

    def _elapsed(self) -> float:
        running = time.perf_counter() - self._start if self._start is not None else 0.0
        return self.resumed_seconds + running

    def state_dict(self) -> dict[str, Any]:
        return {"seconds": self._elapsed()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.resumed_seconds = float(state_dict["seconds"])


class NonFiniteStop(L.Callback):
    """Stop a fit as soon as its training loss or a weight is NaN or inf, naming the step.

    After every training batch the loss is checked, and every ``weights_every_n_steps`` steps each
    parameter (a NaN that reached the weights shows in the loss only a step later, or never when the
    loss is masked). On a non-finite value it records :attr:`failure` (``"non-finite loss nan at
    step 12"`` or ``"non-finite weight 'blocks.0.attn.q_proj.weight' after step 12"``), and then
    raises ``FloatingPointError`` with that message (steps count from 1: ``trainer.global_step``
    after the step) (``raise_error=True``, the default) or sets
    ``trainer.should_stop`` so the fit ends cleanly and the caller reads :attr:`failure`.

    Lightning's ``EarlyStopping(check_finite=True)`` watches a logged metric at validation time
    only; ``detect_anomaly`` slows every backward pass. This is one reduction per check.

    Args:
        weights_every_n_steps: how often the weights are checked (>= 1).
        raise_error: raise, or stop the fit quietly and keep the message in :attr:`failure`.
    """

    def __init__(self, weights_every_n_steps: int = 1, raise_error: bool = True) -> None:
        super().__init__()
        self.weights_every_n_steps = check_int("weights_every_n_steps", weights_every_n_steps)
        self.raise_error = bool(raise_error)
        self.failure: str | None = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, *args: Any) -> None:
        step = trainer.global_step
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, Tensor) and not bool(torch.isfinite(loss.detach()).all()):
            self._stop(trainer, f"non-finite loss {float(loss.detach().float().mean())} at step {step}")
            return
        if step % self.weights_every_n_steps == 0:
            for name, param in pl_module.named_parameters():
                if not bool(torch.isfinite(param.detach()).all()):
                    self._stop(trainer, f"non-finite weight {name!r} after step {step}")
                    return

    def _stop(self, trainer: L.Trainer, message: str) -> None:
        self.failure = message
        trainer.should_stop = True
        if self.raise_error:
            raise FloatingPointError(f"NonFiniteStop: {message}")


class ValidationErrorCurve(L.Callback):
    """The exact-match error of every validation of an :class:`~pe_toolkit.training.ExactMatchModule`, and
    optionally an early stop once it is below ``target_error`` (CoPE's counting protocol, Golovneva et al. 2024).

    :attr:`history` holds ``(global step, error)`` with ``error = 1 - correct / total`` over the module's
    ``val_results`` (exact counts); :attr:`reached_at` is the first step whose error was below the target
    (``None`` while it was not). With ``stop=False`` the curve is only recorded.

    Lightning's ``EarlyStopping(stopping_threshold=...)`` would stop on the float32 logged ``val/exact_match``
    and needs its patience disabled; the recorded curve is needed anyway, so the stop is this callback's.
    """

    def __init__(self, target_error: float, stop: bool = True) -> None:
        super().__init__()
        if isinstance(target_error, bool) or not isinstance(target_error, (int, float)) or not 0.0 < target_error < 1.0:
            raise ValueError(f"target_error must be a number in (0, 1), got {target_error!r}")
        self.target_error, self.stop = float(target_error), bool(stop)
        self.history: list[tuple[int, float]] = []
        self.reached_at: int | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"history": [list(point) for point in self.history], "reached_at": self.reached_at}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = [(int(step), float(error)) for step, error in state_dict["history"]]
        self.reached_at = state_dict["reached_at"]

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        correct = sum(c for c, _ in pl_module.val_results.values())
        total = sum(t for _, t in pl_module.val_results.values())
        error = 1.0 - correct / max(total, 1)
        self.history.append((int(trainer.global_step), error))
        if error < self.target_error:
            if self.reached_at is None:
                self.reached_at = int(trainer.global_step)
            if self.stop:
                trainer.should_stop = True
