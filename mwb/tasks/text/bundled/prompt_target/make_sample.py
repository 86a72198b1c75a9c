"""Write the bundled prompt → target sample: short exchanges from the bundled Shakespeare corpus.

A pair is one speech (the prompt: ``SPEAKER: text``) and the next speaker's reply (the target: its text),
taken where both are short (cast lists and scene headings skipped) (≤ 16 words for the prompt, ≤ 10 for the reply), from the plays in corpus order.
Public-domain text (Project Gutenberg via the ``shakespeare`` package, see mwb/data/corpus/README.md).
Run ``python mwb/tasks/text/bundled/prompt_target/make_sample.py`` to regenerate (deterministic).
"""
import gzip
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "..", "..", "data", "corpus", "shakespeare.jsonl.gz")
SPEAKER = re.compile(r"^([A-Z][A-Za-z]+(?: [A-Z][A-Za-z]+)?)\.$")


def speeches(text: str):
    """(speaker, speech) in order; a bracketed stage direction or blank line ends a speech."""
    who, lines = None, []
    for line in text.splitlines() + [""]:
        line = line.strip()
        m = SPEAKER.match(line)
        if m:
            who, lines = m.group(1), []
        elif who and line and not line.startswith(("[", "SCENE", "ACT ")):
            lines.append(line)
        elif who and lines:
            yield who, " ".join(lines)
            who, lines = None, []


def main(n_train: int = 64, n_dev: int = 16) -> None:
    pairs = []
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        for row in map(json.loads, f):
            if "PERSONS REPRESENTED" in row["text"]:  # the cast list, not dialogue
                continue
            prev = None
            for who, speech in speeches(row["text"]):
                if prev and prev[0] != who and len(prev[1].split()) <= 16 and 2 <= len(speech.split()) <= 10:
                    pairs.append({"prompt": f"{prev[0]}: {prev[1]}\nReply:", "target": speech, "play": row["title"]})
                prev = (who, speech)
            if len(pairs) >= n_train + n_dev:
                break
    for name, rows in (("train", pairs[:n_train]), ("dev", pairs[n_train:n_train + n_dev])):
        with open(os.path.join(HERE, f"{name}.jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
