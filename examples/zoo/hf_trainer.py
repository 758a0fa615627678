"""Fine-tuning a small BertForQuestionAnswering with the Hugging Face Trainer, as its docs write it.

    python hf_trainer.py                                             # one process
    torchrun --nproc-per-node 2 hf_trainer.py --strategy ddp         # DDP (the Trainer picks it under torchrun)
    torchrun --nproc-per-node 2 hf_trainer.py --strategy zero2       # DeepSpeed ZeRO-2 (zero3: ZeRO-3)
    torchrun --nproc-per-node 2 hf_trainer.py --strategy fsdp        # FSDP through Accelerate

The model is built from a config (random weights, no download); the data is a deterministic synthetic QA task:
the answer span starts at a position the first token gives. The Trainer prints its log dict every
``logging_steps``: ``{'loss': '5.541', 'grad_norm': '3.102', 'learning_rate': '0.0009', 'epoch': '0.02'}``.
"""

import argparse

import torch
from transformers import BertConfig, BertForQuestionAnswering, Trainer, TrainingArguments

SEQ = 32


class SpanData(torch.utils.data.Dataset):
    """Sample i is the same on every rank and every run: the answer starts at (first token mod 16)."""

    def __init__(self, size: int, vocab: int) -> None:
        self.size, self.vocab = size, vocab

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict:
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, self.vocab, (SEQ,), generator=g)
        start = int(ids[0]) % 16
        return {
            "input_ids": ids,
            "attention_mask": torch.ones(SEQ, dtype=torch.long),
            "start_positions": torch.tensor(start),
            "end_positions": torch.tensor(start + 3),
        }


def parallelism(strategy: str) -> dict:
    """TrainingArguments for the strategy: the Trainer itself picks DDP under torchrun."""
    if strategy in ("zero2", "zero3"):
        return {
            "deepspeed": {
                "zero_optimization": {"stage": int(strategy[-1])},
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "gradient_clipping": "auto",
                # the Trainer's own torch AdamW, which DeepSpeed has not tested with ZeRO
                "zero_allow_untested_optimizer": True,
            }
        }
    if strategy == "fsdp":
        return {"fsdp": True, "fsdp_config": {"version": 2, "transformer_layer_cls_to_wrap": ["BertLayer"]}}
    return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", choices=["ddp", "zero2", "zero3", "fsdp"], default="ddp")
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--per-device-train-batch-size", type=int, default=8)
    parser.add_argument("--gradient-accumulation-steps", type=int, default=1)
    args = parser.parse_args()

    config = BertConfig(
        vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128
    )
    model = BertForQuestionAnswering(config)
    training_args = TrainingArguments(
        output_dir="out/hf_trainer",
        max_steps=args.max_steps,
        per_device_train_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),  # else, on a CPU-only machine, every rank trains alone
        seed=0,
        **parallelism(args.strategy),
    )
    trainer = Trainer(model=model, args=training_args, train_dataset=SpanData(4096, config.vocab_size))
    trainer.train()


if __name__ == "__main__":
    main()
