"""Command line for training on a synthetic task, with every Trainer argument passed through.

Examples::

    python -m pe_toolkit.training.cli fit --data.task copy_repeat --model.encoding alibi \\
        --trainer.max_steps 2000
    python -m pe_toolkit.training.cli fit --data.task parity --trainer.devices 2 \\
        --trainer.strategy ddp --trainer.accelerator cpu

``model.vocab_size`` is filled in from the data module's vocabulary.
"""

from __future__ import annotations

from lightning.pytorch.cli import LightningCLI

from pe_toolkit.training.lm_module import SequenceLMModule
from pe_toolkit.training.task_data import TaskDataModule


class TaskCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data.vocab_size", "model.vocab_size", apply_on="instantiate")


def main(args: list[str] | None = None) -> TaskCLI:
    return TaskCLI(
        SequenceLMModule, TaskDataModule, args=args, seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
    )


if __name__ == "__main__":
    main()
