"""Build the tiny random-weight Llama + byte-level BPE tokenizer that the slow vLLM test serves.

Run by the vLLM venv's interpreter (`.venv-vllm/bin/python tests/runners/tiny_model.py DIR`):
it needs torch, transformers and tokenizers, which the app's venv does not have. Deterministic
(fixed seeds); see ../shared/reference/vllm_cpu.md for why each size is what it is.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

VOCAB = 2048
SEED = 1234
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _corpus(n_lines: int = 4000) -> list[str]:
    rng = random.Random(SEED)
    words = [
        "the", "a", "model", "server", "token", "request", "latency", "queue", "cache",
        "prefix", "batch", "stream", "first", "last", "time", "user", "system", "answer",
        "question", "hello", "world", "number", "data", "value", "json", "text", "chat",
    ]
    lines = []
    for _ in range(n_lines):
        n = rng.randint(3, 20)
        parts = [rng.choice(words) if rng.random() < 0.8 else str(rng.randint(0, 9999))
                 for _ in range(n)]
        lines.append(" ".join(parts) + rng.choice([".", "?", "!", ",", ":"]))
    return lines


def build(out: Path) -> None:
    """Write config, bf16 weights, tokenizer.json and tokenizer_config.json into `out`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    vocab = tok.get_vocab_size()
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 2048,
        "chat_template": CHATML,
    }, indent=1))

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        torch_dtype="bfloat16",
        eos_token_id=tok.token_to_id("<|im_end|>"),
        pad_token_id=tok.token_to_id("<|endoftext|>"),
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_model.py OUT_DIR")
    build(Path(sys.argv[1]))
    print("built", sys.argv[1])
