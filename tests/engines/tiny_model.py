"""Build the tiny model the real-engine tests serve, from nothing (no hub): `python tiny_model.py DIR`.

A LlamaForCausalLM small enough to start on two CPU cores (hidden 64, 2 layers, 2 heads, 1 KV head,
head_dim 32: the CPU attention takes only some head sizes), a byte-level BPE tokenizer trained here
on a few sentences, a ChatML chat template and ``<|im_end|>`` as EOS. No weights: the engine is
started with ``--load-format dummy`` (random weights), so its replies are noise, and the tests say
what a run must do with a judge that answers noise.

Run by the engine venv's interpreter (it has `tokenizers`); ``gym-prepared.json`` pins the revision
the directory proves (agent/judges/_prepared.py): a digest of the files written here.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "The judge reads the question, the answer and the reference, then gives a score.",
    "SCORE: 10. SCORE: 0. The answer is correct. The answer is wrong.",
    "system user assistant: What is two plus two? Four. What is the capital of France? Paris.",
    "Reasoning: the response matches the reference exactly, so the score is high.",
    '{"REASONING": "short", "SCORE": 7} Final Decision: yes. Final Decision: no.',
    "<think>\n\n</think>\n\n0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?'\"()[]{}",
]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{{ part['text'] }}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CONTEXT = 2048


def tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    return tok


def build(out: Path) -> str:
    """Write the model into ``out``; returns its revision (40 hex digits)."""
    out.mkdir(parents=True, exist_ok=True)
    tok = tokenizer()
    tok.save(str(out / "tokenizer.json"))
    eos = tok.token_to_id("<|im_end|>")
    bos = tok.token_to_id("<|endoftext|>")
    files = {
        "config.json": {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": tok.get_vocab_size(),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "hidden_act": "silu",
            "max_position_embeddings": CONTEXT,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "tie_word_embeddings": False,
            "bos_token_id": bos,
            "eos_token_id": eos,
            "torch_dtype": "bfloat16",
        },
        "generation_config.json": {"bos_token_id": bos, "eos_token_id": eos},
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<|endoftext|>",
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "model_max_length": CONTEXT,
            "chat_template": CHAT_TEMPLATE,
        },
        "special_tokens_map.json": {
            "bos_token": "<|endoftext|>",
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
        },
    }
    for name, body in files.items():
        (out / name).write_text(json.dumps(body, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    digest = hashlib.sha1()
    for name in sorted([*files, "tokenizer.json"]):
        digest.update(name.encode() + b"\0" + (out / name).read_bytes())
    revision = digest.hexdigest()
    (out / "gym-prepared.json").write_text(json.dumps({"revision": revision}) + "\n", encoding="utf-8")
    return revision


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_model.py DIR")
    print(build(Path(sys.argv[1])))
