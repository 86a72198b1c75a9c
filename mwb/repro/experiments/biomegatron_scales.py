"""The ``biomegatron`` experiment's scales, its scope paragraph per scale and its picture.

Why a module of its own: the numbers that size each scale (silver-set citations, vocabulary size and text,
pretraining and fine-tuning steps) and the paragraph that says what those sizes can show belong together,
apart from the experiment's declarations and commands (:mod:`.biomegatron`).
"""
from __future__ import annotations

import json
import math

from ..api import Scale
from ..plot import t_interval

# Every scale's params: silver = (train, devel, test) citations of `mwb data silver-ner`; vocab_size and
# max_words = the WordPiece size and the words of text each vocabulary learns from (None: all of it);
# heldout = the file (beside the MEDLINE training file) the vocabulary statistics read; pt_docs = PubMed
# abstracts tokenized for pretraining (None: all 18,445); model = --set overrides of the preset.
_COMMON = {"preset": "bert-tiny", "model": {}, "vocab_size": 8000, "max_words": 190_000,
           "heldout": "pubmed20n0014.xml.gz", "workers": 1, "pt_batch": 16, "pt_micro": 16, "pt_seq": 128,
           "pt_warmup": 20, "pt_lr": 1e-3, "ft_epochs": 3, "ft_lr": 1e-3, "ft_batch": 16, "ft_seq": 128}
SCALES = {
    "smoke": Scale("smoke", "pipeline check: 24/6/12 silver citations, 1,000-entry vocabularies from 10,000 words, "
                   "4 pretraining steps of 8 × 64 tokens on 100 abstracts, one fine-tuning epoch (11 steps; it "
                   "tags nothing yet); held-out text a single citation",
                   budget="≤ 2 min on 2 cores (4 conditions × 2 seeds)", seeds=2,
                   params={**_COMMON, "silver": (24, 6, 12), "vocab_size": 1000, "max_words": 10_000,
                           "heldout": "pubmed-29768149.xml", "pt_docs": 100, "pt_steps": 4, "pt_batch": 8,
                           "pt_micro": 8, "pt_seq": 64, "pt_warmup": 1, "ft_epochs": 1, "ft_seq": 64}),
    "cpu": Scale("cpu", "bert-tiny (4 × 128), 8,000-entry vocabularies from 190,000 words each, 200 pretraining "
                 "steps of 16 × 128 tokens on 3,000 PubMed abstracts, 3 fine-tuning epochs on 200 silver citations, "
                 "tested on 300, 5 seeds", budget="≈ 30 min on 2 quiet cores (4 conditions × 5 seeds; ≈ 160 s a cell "
                 "in the 3-seed report, run at load 4)", seeds=5,
                 params={**_COMMON, "silver": (200, 25, 300), "pt_docs": 3000, "pt_steps": 200}),
    "gpu": Scale("gpu", "a 6 × 512 BERT (bert-tiny's post-norm and rotary positions), 8,000-entry vocabularies from "
                 "190,000 words, 1,000 pretraining steps of 64 × 128 tokens on all 18,445 abstracts, 3 fine-tuning "
                 "epochs on 800 silver citations, tested on 1,000", budget="≤ 10 min on one H200 (estimated, not "
                 "yet run)", seeds=3,
                 params={**_COMMON, "model": {"num_layers": 6, "hidden_size": 512, "num_attention_heads": 8},
                         "silver": (800, 50, 1000), "pt_docs": None, "workers": 8, "pt_steps": 1000, "pt_batch": 64,
                         "pt_micro": 64, "pt_warmup": 50, "pt_lr": 5e-4, "ft_lr": 2e-4, "ft_batch": 32,
                         "precision": "bf16"}),
    "paper": Scale("paper", "BioMegatron 345m (BERT-large's 24 × 1024), 30,000-entry vocabularies from the whole "
                   "of each text, about one epoch of PubMed at batch 1,024 × 512, fine-tuned 30 epochs at lr 5e-5 on "
                   "BC5CDR-chem", seeds=3,
                   budget="one BERT-large pretraining per cell on a GPU cluster (--dry-run: mwb plan's estimate)",
                   params={**_COMMON, "preset": "bert-large", "vocab_size": 30_000, "max_words": None,
                           "silver": None, "pt_docs": None, "workers": 16, "pt_steps": 15_000, "pt_batch": 1024,
                           "pt_micro": 4, "pt_seq": 512, "pt_warmup": 150, "pt_lr": 1e-4, "ft_epochs": 30,
                           "ft_lr": 5e-5, "ft_batch": 32, "precision": "fp16"}),
}


def sets(model: dict) -> list[str]:
    """``--set model.KEY=VALUE`` for each model override."""
    return [a for k, v in model.items() for a in ("--set", f"model.{k}={v}")]


def last_train_value(path: str, key: str):
    """The last training record's ``key`` in a run's ``metrics.jsonl`` (None if absent)."""
    return _last_value(path, key, lambda rec: "split" not in rec)


def last_valid_value(path: str, key: str):
    """The last validation record's ``key`` in a run's ``metrics.jsonl`` (None if absent): e.g. the dev MLM
    loss that ``mwb pretrain`` measures at its last step."""
    return _last_value(path, key, lambda rec: rec.get("split") == "valid")


def _last_value(path: str, key: str, wanted):
    value = None
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                if wanted(rec) and key in rec:
                    value = rec[key]
    except (OSError, json.JSONDecodeError):
        return None
    return value


def scope(scale: Scale) -> str:
    p = scale.params
    model = f"{p['preset']}" + (" with " + ", ".join(f"{k} {v}" for k, v in p["model"].items()) if p["model"] else "")
    if scale.name == "paper":
        data = ("Vocabularies, pretraining and the NER data are the user's (--set pubmed_text, general_text, "
                "ner_data): with PubMed abstracts + PMC full text, Wikipedia + BooksCorpus and BC5CDR-chem this is "
                "the paper's comparison with casing crossed and the model fixed. Two things still differ from the "
                "paper: its vocabularies are SentencePiece (mwb's --lowercase exists for WordPiece only, and "
                "casing is the control here), and its batch, steps and cluster for pretraining are not stated "
                "(Megatron-LM's BERT recipe is assumed; --dry-run prints mwb plan's estimate).")
        return f"Model {model}, {p['pt_steps']:,} pretraining steps, vocabularies of {p['vocab_size']:,}. {data}"
    tr, dv, te = p["silver"]
    parts = [
        f"Each condition is {scale.seeds} independent seeds of the whole chain (vocabulary, pretraining of {model} "
        f"for {p['pt_steps']:,} steps of {p['pt_batch']} × {p['pt_seq']} tokens, {p['ft_epochs']} fine-tuning "
        f"epochs on {tr} silver citations); the F1 is on the {te} held-out test citations, and the paired test "
        "pairs sentences by id within each seed (sign-flip permutation, entity counts re-summed per resample).",
        f"The vocabularies have {p['vocab_size']:,} entries learned from {p['max_words']:,} words each: the general "
        "text is the 99-article Wikipedia extract bundled with mwb (all of it), the biomedical text as many words "
        "of PubMed abstracts. Same text amount and casing make the domain the only difference; the paper's "
        "vocabularies are 30k/50k SentencePiece pieces learned from billions of words (BERT's from Wikipedia + "
        "books), and how much of the contrast survives at that size this cannot show.",
        "The labels are silver (each citation's own MeSH ChemicalList names matched in its abstract, "
        "case-insensitively): unlisted or differently written chemicals count as false positives, and the labels "
        "reward knowing the listed names, which a vocabulary keeping them whole may help more than on gold "
        "BC5CDR-chem. Absolute F1 is not comparable with the paper's 0.92 (gold labels, a 345m model pretrained "
        "for an epoch of 6.1B words to MLM loss 1.2, 30 epochs of fine-tuning); the direction of the difference "
        "is what this scale tests.",
        "The pretraining is short (the last MLM loss is in results.json details), so most of what the model "
        "knows of the vocabulary comes from fine-tuning; a vocabulary effect that needs long pretraining "
        "would not show here. The vocabulary statistics are computed once per vocabulary (the first seed's "
        "cell): their ± 0 is no spread over seeds. WordPiece training breaks equal-count ties in hash order, so "
        "the last few entries can differ between seeds' vocabularies (a few of thousands).",
        "Two non-headline rows: uncased against uncased, and the pairing docs/biomedical.md made (cased bio "
        "against uncased general), which changes casing and domain at once.",
    ]
    if scale.name == "smoke":
        parts.insert(0, "Smoke scale: every number here checks the pipeline, not the claim (a few steps on a "
                        "few dozen sentences; the held-out text of the vocabulary statistics is one citation).")
    return " ".join(parts)


def plot(results: dict, path: str) -> str:
    """Two panels: test F1 per condition (mean over seeds, 95% t-interval, each seed a dot, the paper's BC5CDR
    value a red cross), and the entities' pieces per word (ours on the silver mentions, the paper's Table 3)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conds = results["conditions"]
    names = list(conds)
    paper = {(pv["condition"], pv["metric"]): pv["value"] for pv in results["paper_values"]}
    second = "term_pieces_per_word" if any("term_pieces_per_word" in conds[c] for c in names) else "pieces_per_word"
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, metric in zip(axes, ("f1", second)):
        xs = [i for i, c in enumerate(names) if metric in conds[c]]
        vals = [conds[names[i]][metric] for i in xs]
        means = [sum(v) / len(v) for v in vals]
        ax.bar(xs, means, yerr=[t_interval(v) for v in vals], capsize=4, color="#4c72b0", alpha=0.85,
               label="ours: mean, 95% t-interval" if metric == "f1" else "ours")
        for i, v in zip(xs, vals):
            ax.scatter([i] * len(v), v, color="black", s=10, zorder=3)
        px = [(i, paper[(c, metric)]) for i, c in enumerate(names) if (c, metric) in paper]
        if px:
            ax.scatter([i for i, _ in px], [v for _, v in px], marker="x", color="#c44e52", s=70, zorder=4,
                       label="paper (BC5CDR-chem)")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
        finite = [m for m in means if math.isfinite(m)]
        ax.set_title("test entity F1 (silver chemicals)" if metric == "f1" else
                     f"{metric.replace('_', ' ')} ({'training mentions' if metric.startswith('term') else 'held-out'})",
                     fontsize=9)
        if finite and metric == "f1":
            ax.set_ylim(0, 1)
        ax.legend(fontsize=7)
    fig.suptitle(f"{results['experiment']} ({results['scale']} scale): verdict {results['verdict']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
