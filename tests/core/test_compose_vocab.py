"""compose.check_tokenizer_fits: a tokenizer with ids past the model's true vocabulary is refused in one line
(under TP those ids would fall silently into padded rows; one process fails with an IndexError)."""
import subprocess
import sys

import pytest

from mwb.core.compose import check_tokenizer_fits
from mwb.core.config import ConfigError
from tests.core.parallel.test_padded_vocab import hf_gpt2_dir
from tests.helpers.checkpoints import TOKENIZER
from tests.helpers.needs import needs


def test_a_tokenizer_within_the_vocabulary_passes_and_one_past_it_is_refused():
    check_tokenizer_fits(317, 317, "m", "t")
    check_tokenizer_fits(50304, 50257, "m", "t")  # a padded (larger) model vocabulary is fine
    with pytest.raises(ConfigError, match="the tokenizer t has 318 ids but the model m has a vocabulary of 317"):
        check_tokenizer_fits(317, 318, "m", "t")


@needs("transformers")
def test_finetune_refuses_a_larger_tokenizer_in_one_line(tmp_path):
    hf = hf_gpt2_dir(tmp_path / "gpt2", 317)
    proc = subprocess.run([sys.executable, "-m", "mwb", "finetune", "prompt-target", "--checkpoint", hf,
                           "--tokenizer", TOKENIZER, "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "has 8,192 ids but the model" in lines[0] and "vocabulary of 317" in lines[0], \
        proc.stderr[-2000:]
