"""``mwb preprocess`` and ``mwb tokenizer train`` as a user runs them: outputs, messages, exit statuses."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mwb.cli.main import main
from mwb.core.data.indexed import IndexedDataset


def run(argv, capsys):
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_preprocess_cli(tmp_path, capsys, tok_path, tok):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps({"text": "One doc. Two sentences here.", "t": "x"}) + "\n")
    b.write_text(json.dumps({"text": "Second file.", "t": "y"}) + "\n")
    prefix = str(tmp_path / "out" / "c")
    code, out, err = run(["preprocess", "--input", str(a), str(b), "--output-prefix", prefix, "--tokenizer", tok_path,
                          "--json-keys", "text", "t", "--append-eod", "--split-sentences"], capsys)
    assert code == 0, err
    assert f"{prefix}_text_sentence.bin" in out and f"{prefix}_t_sentence.idx" in out and "2 documents" in out
    ix = IndexedDataset(f"{prefix}_text_sentence")
    assert ix.num_documents == 2 and len(ix) == 3  # 2 sentences + 1
    assert tok.decode(ix.document(0)) == "One doc. Two sentences here.<|endoftext|>"


def test_preprocess_cli_bad_line(tmp_path, capsys, tok_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"text": broken}\n')
    prefix = str(tmp_path / "o")
    argv = ["preprocess", "--input", str(bad), "--output-prefix", prefix, "--tokenizer", tok_path]
    code, out, err = run(argv, capsys)
    assert code == 1 and err.count("\n") == 1 and f"{bad}:2: malformed JSON" in err and "Traceback" not in err
    assert os.listdir(tmp_path) == ["bad.jsonl"]
    code, out, err = run(["preprocess", "--input", str(bad), "--output-prefix", prefix, "--tokenizer", tok_path,
                          "--skip-bad"], capsys)
    assert code == 0 and "skipped 1 malformed record" in err and "1 documents" in out


@pytest.mark.skipif(sys.platform == "win32", reason="posix paths")
def test_preprocess_subprocess_exit_status(tmp_path, tok_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\nnot json\n')
    p = subprocess.run([sys.executable, "-m", "mwb", "preprocess", "--input", str(bad), "--output-prefix",
                        str(tmp_path / "o"), "--tokenizer", tok_path],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and p.stderr.strip().count("\n") == 0 and f"{bad}:2:" in p.stderr, p.stderr


def test_tokenizer_train_cli(tmp_path, capsys):
    src = tmp_path / "t.txt"
    src.write_text("the quick brown fox jumps over the lazy dog\n" * 30)
    out_dir = tmp_path / "tok"
    code, out, err = run(["tokenizer", "train", "--type", "wordpiece", "--vocab-size", "200", "--t5",
                          "--out", str(out_dir), str(src)], capsys)
    assert code == 0, err
    assert "wordpiece tokenizer" in out and os.path.isfile(out_dir / "vocab.txt")
    code, out, err = run(["tokenizer", "info", str(out_dir / "vocab.txt")], capsys)
    assert code == 0 and "cls: 3" in out and "t5 sentinels: 100" in out
    code, out, err = run(["tokenizer", "train", "--type", "bpe", "--vocab-size", "10", "--out", str(out_dir), str(src)],
                         capsys)
    assert code == 1 and "too small" in err
