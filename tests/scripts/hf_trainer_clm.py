"""Run by tests/test_launch_real.py under ``ascend-tune run``: a causal-LM script in the shape of Hugging Face's
``run_clm.py`` example, written for this project (nothing of ascend_tune in it). A model built from ``--config_name``,
a saved tokenizer, a text file tokenised, concatenated and cut into ``--block_size`` blocks whose labels are their
inputs, then ``transformers.Trainer`` with the command line's ``TrainingArguments``; ``trainer_state.json`` (the
Trainer's own log of each step's loss) is saved in ``--output_dir``. Needs no ``datasets``: the blocks are a list."""

from __future__ import annotations

import dataclasses
import sys

from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)


@dataclasses.dataclass
class ModelAndData:
    """The arguments of this script beside the Trainer's."""

    config_name: str
    tokenizer_name: str
    train_file: str
    block_size: int = 16


def blocks(path: str, tokenizer, size: int) -> list:
    """Every line of ``path`` tokenised, the ids concatenated and cut into whole blocks of ``size`` (the rest dropped,
    as run_clm's ``group_texts``); each block's labels are its inputs (the model shifts them)."""
    with open(path, encoding="utf-8") as fh:
        ids = [i for line in fh if line.strip() for i in tokenizer(line.strip())["input_ids"]]
    return [{"input_ids": ids[s:s + size], "attention_mask": [1] * size, "labels": ids[s:s + size]}
            for s in range(0, len(ids) - size + 1, size)]


def main(argv: list) -> None:
    ours, training = HfArgumentParser((ModelAndData, TrainingArguments)).parse_args_into_dataclasses(argv)
    set_seed(training.seed)
    tokenizer = AutoTokenizer.from_pretrained(ours.tokenizer_name)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ours.config_name))
    trainer = Trainer(model=model, args=training, train_dataset=blocks(ours.train_file, tokenizer, ours.block_size),
                      data_collator=default_data_collator)
    result = trainer.train()
    trainer.log_metrics("train", result.metrics)
    trainer.save_state()


if __name__ == "__main__":
    main(sys.argv[1:])
