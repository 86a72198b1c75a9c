"""``mwb finetune race --checkpoint DIR`` with DIR a plain Hugging Face ``BertModel`` (all-MiniLM-L6-v2, no
masked-LM head) fine-tunes from it and learns a RACE-format set where the answer is the only option the
article names: dev accuracy ≥ 0.8 after 2 epochs (chance 0.25)."""
import json
import os
import random
import subprocess
import sys

from tests.helpers.minilm import minilm_dir
from tests.helpers.needs import needs

FACTS = {"animal": ["tiger", "rabbit", "horse", "dolphin", "parrot", "camel", "zebra", "penguin"],
         "fruit": ["banana", "cherry", "mango", "peach", "grape", "melon", "lemon", "plum"],
         "colour": ["red", "green", "blue", "yellow", "purple", "orange", "white", "black"],
         "city": ["London", "Paris", "Tokyo", "Cairo", "Berlin", "Madrid", "Sydney", "Toronto"]}
PEOPLE = ["Mary", "John", "Linda", "James", "Susan", "Robert", "Karen", "Paul"]


def story(rng: random.Random) -> dict:
    """One article naming one word of each kind; two questions whose three wrong options the article never
    mentions (same kind of word), so matching the options against the article answers them."""
    who = rng.choice(PEOPLE)
    pick = {kind: rng.choice(words) for kind, words in FACTS.items()}
    article = (f"{who} went to {pick['city']}, saw a {pick['animal']} at the zoo, ate a {pick['fruit']} and "
               f"bought a {pick['colour']} hat.")
    ask = {"city": f"Which city did {who} travel to?", "animal": f"Which animal did {who} watch at the zoo?",
           "fruit": f"What did {who} eat in the park?", "colour": f"What colour was the hat {who} bought?"}
    out = {"article": article, "questions": [], "options": [], "answers": []}
    for kind in rng.sample(sorted(FACTS), 2):
        options = rng.sample([w for w in FACTS[kind] if w != pick[kind]], 3) + [pick[kind]]
        rng.shuffle(options)
        out["questions"].append(ask[kind])
        out["options"].append(options)
        out["answers"].append("ABCD"[options.index(pick[kind])])
    return out


def write_race(root: str, articles: dict, seed: int = 0) -> str:
    """The official layout: ``root/{split}/{middle,high}/N.txt``, one JSON article per file."""
    rng = random.Random(seed)
    for split, n in articles.items():
        for i in range(n):
            level = "middle" if i % 2 == 0 else "high"
            os.makedirs(os.path.join(root, split, level), exist_ok=True)
            with open(os.path.join(root, split, level, f"{i}.txt"), "w", encoding="utf-8") as f:
                json.dump({**story(rng), "id": f"{level}/{i}.txt"}, f)
    return root


@needs(models=["minilm-l6"])
def test_race_from_a_plain_bert_model_directory(tmp_path):
    model = minilm_dir()
    # 96 train / 32 dev questions: with half the training set (6 steps an epoch) MiniLM sat at the threshold
    # (0.41-0.88 over data seeds); with 12 steps an epoch its loss falls and dev accuracy is 0.84, then 0.91
    data = write_race(str(tmp_path / "RACE"), {"train": 48, "dev": 16}, seed=7)
    out = str(tmp_path / "run")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "mwb", "finetune", "race", "--checkpoint", model, "--data", data,
                           "--epochs", "2", "--out", out, "--seq-length", "64", "--global-batch-size", "8",
                           "--micro-batch-size", "8", "--lr", "1e-4"],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no masked-LM head" not in proc.stderr
    res = json.load(open(os.path.join(out, "results.json")))
    assert res["metrics"]["count_all"] == 32
    assert res["metrics"]["accuracy"] >= 0.8, res["metrics"]  # chance is 0.25
    # evaluating the fine-tuned run (a headless encoder + task head) reproduces the dev accuracy
    proc = subprocess.run([sys.executable, "-m", "mwb", "eval", "race", "--checkpoint", out, "--data", data, "--out",
                           str(tmp_path / "eval")], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ev = json.load(open(tmp_path / "eval" / "results.json"))
    assert ev["metrics"]["accuracy"] == res["metrics"]["accuracy"]
