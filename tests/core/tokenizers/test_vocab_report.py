"""`mwb tokenizer report`: pieces per word and terms kept whole, hand-computed on a WordPiece vocabulary."""
import json

import pytest

from mwb.core.tokenizers import load_tokenizer
from mwb.core.tokenizers.report import vocab_report, word_counts
from tests.helpers.cli import run_cli

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _vocab(tmp_path, name, words):
    d = tmp_path / name
    d.mkdir()
    (d / "vocab.txt").write_text("\n".join(SPECIAL + words) + "\n")
    return str(d / "vocab.txt")


def test_hand_computed_pieces_and_terms(tmp_path):
    bio = _vocab(tmp_path, "bio", ["the", "dose", "aspirin", "as", "##pir", "##in"])
    general = _vocab(tmp_path, "general", ["the", "dose", "as", "##pir", "##in"])
    counts = word_counts(["the aspirin dose, aspirin."])
    assert counts == {"the": 1, "aspirin": 2, "dose": 1}
    terms = ["aspirin", "the dose"]
    b = vocab_report(load_tokenizer(bio), counts, terms)
    g = vocab_report(load_tokenizer(general), counts, terms)
    assert (b["pieces_per_word"], b["words_whole"], b["terms_whole"]) == (1.0, 1.0, 1.0)
    # aspirin → as ##pir ##in: (1 + 2·3 + 1) / 4 pieces per word; 2 of 4 words whole; "the dose" whole
    assert (g["pieces_per_word"], g["words_whole"], g["terms_whole"]) == (2.0, 0.5, 0.5)
    # the terms' words: aspirin (3 pieces), the, dose (1 each) → 5 pieces / 3 words; a repeated term weighs twice
    assert (b["term_pieces_per_word"], g["term_pieces_per_word"]) == (1.0, 5 / 3)
    assert vocab_report(load_tokenizer(general), counts, terms + ["aspirin"])["term_pieces_per_word"] == 8 / 4


def test_cli_table_and_json(tmp_path, capsys):
    bio = _vocab(tmp_path, "bio", ["the", "dose", "aspirin"])
    text = tmp_path / "held_out.txt"
    text.write_text("the aspirin dose\n")
    terms = tmp_path / "terms.txt"
    terms.write_text("aspirin\n")
    out = tmp_path / "report.json"
    code, stdout, err = run_cli(["tokenizer", "report", bio, "--text", str(text), "--terms", str(terms),
                                 "--json", str(out)], capsys)
    assert code == 0, err
    assert "pieces/word" in stdout and "100.0%" in stdout
    assert json.loads(out.read_text())[bio]["pieces_per_word"] == pytest.approx(1.0)
