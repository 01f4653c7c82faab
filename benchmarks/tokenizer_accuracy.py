"""How close pbkv-server's offline token counts are to a byte-level BPE tokenizer.

No pretrained BPE vocabulary can be downloaded at run time, so this script trains one offline
(``tokenizers`` BpeTrainer, byte-level, vocabulary up to 50,000) on 80 % of the documents of the
shared data sets (ChatDev multi-agent logs, SWE-bench Lite problem statements and patches,
FinanceBench questions and evidence, HoVer claims) and compares, on the held-out 20 %, its token counts with
:func:`pbkv_server.scenarios.tokenizer.count_tokens`. Prints, per corpus and overall, the ratio
approx / BPE of total tokens and the mean absolute per-document relative error.

Run: ``.venv/bin/python benchmarks/tokenizer_accuracy.py`` (about 10-30 s on 2 cores).
"""

from __future__ import annotations

import json
import os
import random
import sys
import tarfile
from pathlib import Path

from pbkv_server.scenarios.tokenizer import count_tokens


def load_corpora(data_dir: Path) -> dict[str, list[str]]:
    """Documents per corpus from the shared data sets (raises FileNotFoundError if absent)."""
    swe = json.loads((data_dir / "swebench" / "swe-bench-lite.json").read_text())
    fin = [json.loads(line) for line in (data_dir / "financebench" / "financebench_open_source.jsonl").open()]
    hover = json.loads((data_dir / "hover" / "hover_dev_release_v1.1.json").read_text())
    fin_docs = []
    for row in fin:
        evidence = " ".join(e.get("evidence_text", "") for e in row.get("evidence", []) if isinstance(e, dict))
        fin_docs.append(row["question"] + "\n" + evidence)
    chatdev: list[str] = []
    with tarfile.open(data_dir / "chatdev" / "chatdev_warehouse_logs.tar.gz") as tar:
        for member in tar:
            fh = tar.extractfile(member) if member.isfile() else None
            if fh is not None:
                text = fh.read().decode("utf-8", errors="replace")
                # Logs are long: 8,000-character pieces make documents of agent-prompt size.
                chatdev.extend(text[i : i + 8000] for i in range(0, len(text), 8000))
    return {
        "chatdev-logs": chatdev,
        "swebench-text": [r["problem_statement"] for r in swe],
        "swebench-code": [r["patch"] for r in swe],
        "financebench": fin_docs,
        # Claims are short: group 20 per document so per-document errors are meaningful.
        "hover": ["\n".join(c["claim"] for c in hover[i : i + 20]) for i in range(0, len(hover), 20)],
    }


def main() -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    data_dir = Path(os.environ.get("PBKV_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
    corpora = load_corpora(data_dir)
    rng = random.Random(0)
    train, test = [], {}
    for name, docs in corpora.items():
        docs = [d for d in docs if d.strip()]
        rng.shuffle(docs)
        cut = int(len(docs) * 0.8)
        train.extend(docs[:cut])
        test[name] = docs[cut:]

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=50_000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(train, trainer=trainer)
    print(f"trained byte-level BPE: vocabulary {bpe.get_vocab_size()}, {len(train)} training documents")

    total_bpe = total_approx = 0
    print(f"{'corpus':<15} {'docs':>5} {'BPE tokens':>11} {'approx':>9} {'ratio':>6} {'mean |err|':>10}")
    for name, docs in test.items():
        b = [len(bpe.encode(d).ids) for d in docs]
        a = [count_tokens(d) for d in docs]
        err = sum(abs(x - y) / y for x, y in zip(a, b) if y) / max(1, len(docs))
        total_bpe += sum(b)
        total_approx += sum(a)
        print(f"{name:<15} {len(docs):>5} {sum(b):>11} {sum(a):>9} {sum(a) / sum(b):>6.3f} {err:>10.1%}")
    print(f"{'all':<15} {'':>5} {total_bpe:>11} {total_approx:>9} {total_approx / total_bpe:>6.3f}")


if __name__ == "__main__":
    sys.exit(main())
