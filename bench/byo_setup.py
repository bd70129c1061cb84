"""What a bench.scripts case makes in its work copy at run time, beside bench/byo's own files: inputs
that are generated (a tiny model folder, data files) or installed (TRL's own scripts/sft.py), never
committed."""

from __future__ import annotations

import json
import random
import shutil
from contextlib import chdir, contextmanager
from pathlib import Path
from typing import Iterator

VOCAB = 1024
BYO = Path(__file__).parent / "byo"


@contextmanager
def scratch(root: Path, setup: str = "") -> Iterator[Path]:
    """bench/byo copied to root/byo, `setup` (a function of this module) run on it, and root the working
    folder while the block runs: a case's words name their files relative to it, as bench.scripts runs
    them, and the recorder and the search replay read the same script the same way."""
    shutil.copytree(BYO, root / "byo")
    if setup:
        globals()[setup](root)
    with chdir(root):
        yield root


def trl_sft(work: Path) -> None:
    """TRL's installed scripts/sft.py copied as it is, a tiny Qwen2 model folder (random weights, a word-level
    tokenizer over token ids) and a JSON-lines dataset of token rows, under work/trl/ (byo/trl_sft.yaml names
    them)."""
    import trl
    from tokenizers import Tokenizer, models
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    folder = work / "trl"
    (folder / "data").mkdir(parents=True)
    shutil.copyfile(Path(trl.__file__).parent / "scripts" / "sft.py", folder / "sft.py")
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{f"t{i}": i for i in range(3, VOCAB)}}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
                                        pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    config = AutoConfig.for_model("qwen2", vocab_size=VOCAB, hidden_size=64, intermediate_size=256,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  tie_word_embeddings=True, use_cache=False, pad_token_id=0, eos_token_id=1)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder / "tiny")
    tokenizer.save_pretrained(folder / "tiny")
    rng = random.Random(0)
    lines = (json.dumps({"input_ids": [rng.randrange(3, VOCAB) for _ in range(min(127, int(12 * rng.paretovariate(1.6))))]})
             for _ in range(3000))
    (folder / "data" / "train.jsonl").write_text("\n".join(lines) + "\n")
