"""A tiny, randomly initialised Qwen2 model that SGLang can serve on a CPU (tests, demos; offline).

``python -m pbkv_server.testing.sglang.tiny_model --out DIR`` writes a model folder that
``sglang.launch_server --model-path DIR --device cpu`` loads: a Qwen2 config (2 layers, hidden
256, 4 attention heads, 2 KV heads, vocabulary 8,192) with random weights saved by transformers'
``save_pretrained``, and a byte-level BPE tokenizer trained with ``tokenizers`` on a seeded
synthetic corpus, saved as ``PreTrainedTokenizerFast`` with a ChatML chat template. Nothing is
downloaded. Its answers are noise: it exists so that SGLang's scheduler, radix cache and the PBKV
plugin run on real requests (cache behaviour is real; timings say nothing about a GPU).

The same seed gives the same files: the corpus comes from ``random.Random(seed)``, BPE training
is deterministic for a fixed corpus, and the weights from ``torch.manual_seed(seed)``; the file
``pbkv_tiny_model.json`` records the settings and a digest of every other file.

Needs ``torch``, ``transformers`` and ``tokenizers`` (all in ``.venv-sglang``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["TinyModelSpec", "build_tiny_model", "synthetic_corpus", "is_built", "main"]

#: Written last into the model folder: the spec and a SHA-256 of every other file.
MANIFEST = "pbkv_tiny_model.json"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: ChatML, the format of Qwen2 chat models: SGLang's OpenAI chat endpoint renders prompts with it.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Syllables of the synthetic corpus: enough combinations that BPE training reaches 8,192 entries.
_ONSETS = ("", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
           "br", "ch", "cl", "dr", "fl", "gr", "pl", "pr", "sh", "st", "th", "tr")
_NUCLEI = ("a", "e", "i", "o", "u", "ai", "ea", "ee", "oo", "ou", "y")
_CODAS = ("", "", "n", "r", "s", "t", "l", "m", "ng", "ck", "nd", "st")


@dataclass(frozen=True)
class TinyModelSpec:
    """What :func:`build_tiny_model` builds (sizes in units of the model: layers, features, tokens).

    Attributes:
        layers, hidden, heads, kv_heads, intermediate: Qwen2 shape (hidden divisible by heads,
            heads by kv_heads).
        vocab: model vocabulary = BPE tokenizer vocabulary, entries (> 256 + special tokens).
        max_positions: longest context the config allows, tokens.
        seed: seeds the corpus and the weights.
        corpus_words: words in the tokenizer's training corpus.
    """

    layers: int = 2
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 512
    vocab: int = 8192
    max_positions: int = 8192
    seed: int = 0
    corpus_words: int = 400_000

    def check(self) -> None:
        """Raise ``ValueError`` for an inconsistent shape."""
        if min(self.layers, self.hidden, self.heads, self.kv_heads, self.intermediate, self.max_positions) < 1:
            raise ValueError("every size must be >= 1")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError("hidden must be divisible by heads, and heads by kv_heads")
        if self.vocab <= 256 + len(SPECIAL_TOKENS):
            raise ValueError(f"vocab must exceed {256 + len(SPECIAL_TOKENS)} (byte alphabet + special tokens)")


def build_tiny_model(out_dir: str | Path, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """Write the model folder (config, safetensors weights, tokenizer, manifest) to ``out_dir``.

    An existing folder whose manifest records the same spec is kept as it is (idempotent).

    Returns:
        The folder path.

    Raises:
        ValueError: a bad spec, or BPE training that could not reach ``spec.vocab`` entries.
        OSError: the folder cannot be written.
    """
    spec.check()
    out = Path(out_dir)
    if is_built(out, spec):
        return out
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # a half-written folder never looks complete
    tokenizer = _train_tokenizer(spec)
    tokenizer.save_pretrained(out)
    _random_model(spec, tokenizer).save_pretrained(out)
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
               for p in sorted(out.iterdir()) if p.is_file() and p.name != MANIFEST}
    (out / MANIFEST).write_text(json.dumps({"spec": asdict(spec), "sha256": digests}, indent=1, sort_keys=True))
    return out


def is_built(out_dir: str | Path, spec: TinyModelSpec = TinyModelSpec()) -> bool:
    """True when ``out_dir`` holds a complete build of ``spec`` (manifest present, files unchanged)."""
    manifest = Path(out_dir) / MANIFEST
    try:
        data = json.loads(manifest.read_text())
        if data.get("spec") != asdict(spec):
            return False
        return all(hashlib.sha256((manifest.parent / name).read_bytes()).hexdigest() == digest
                   for name, digest in data["sha256"].items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def synthetic_corpus(n_words: int, seed: int) -> list[str]:
    """Seeded pseudo-English lines (words of 1-4 syllables, punctuation, digits), about 12 words each.

    Returns:
        Lines of text; the same ``(n_words, seed)`` gives the same lines on every machine.
    """
    rng = random.Random(seed)
    # A Zipf-like lexicon: frequent short words become single tokens first, as in real text.
    lexicon = ["".join(rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS)
                       for _ in range(rng.choice((1, 1, 2, 2, 2, 3, 3, 4)))) for _ in range(20_000)]
    weights = [1.0 / (rank + 1) for rank in range(len(lexicon))]
    words = rng.choices(lexicon, weights=weights, k=n_words)
    lines, line = [], []
    for i, word in enumerate(words):
        if not line:
            word = word.capitalize()
        if rng.random() < 0.03:
            word = f"{word} {rng.randrange(10_000)}"
        line.append(word)
        if len(line) >= 8 and rng.random() < 0.15:
            lines.append(" ".join(line) + rng.choice(".?!:"))
            line = []
    if line:
        lines.append(" ".join(line) + ".")
    return lines


def main(argv: list[str] | None = None) -> int:
    """CLI: ``--out DIR [--seed N]``; prints the folder. Exit status 2 on a bad argument or write."""
    parser = argparse.ArgumentParser(prog="python -m pbkv_server.testing.sglang.tiny_model",
                                     description="Build a tiny random Qwen2 model folder for SGLang on CPU (offline).")
    parser.add_argument("--out", required=True, help="model folder to write (kept if already built)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the tokenizer corpus and the weights")
    args = parser.parse_args(argv)
    try:
        path = build_tiny_model(args.out, TinyModelSpec(seed=args.seed))
    except (ValueError, OSError) as exc:
        print(f"tiny_model: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


def _train_tokenizer(spec: TinyModelSpec):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=spec.vocab, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(synthetic_corpus(spec.corpus_words, spec.seed), trainer=trainer)
    if tok.get_vocab_size() != spec.vocab:
        raise ValueError(f"BPE training reached {tok.get_vocab_size()} entries, not {spec.vocab}: "
                         "raise corpus_words")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None, model_max_length=spec.max_positions)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _random_model(spec: TinyModelSpec, tokenizer):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=spec.vocab, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
        max_position_embeddings=spec.max_positions, tie_word_embeddings=False,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        torch_dtype="bfloat16",
    )
    torch.manual_seed(spec.seed)
    model = Qwen2ForCausalLM(config)
    return model.to(torch.bfloat16)


if __name__ == "__main__":
    raise SystemExit(main())
