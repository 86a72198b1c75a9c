"""``biomegatron``: does a biomedical vocabulary beat a general one on biomedical NER, casing held fixed?

Shin et al. 2020 find the subword vocabulary "the most critical factor" for NER: their PubMed vocabulary
splits entities into fewer pieces (Table 3) and BioMegatron with it leads their BC5CDR-chem table (Table 1).
That table, like the older row in docs/biomedical.md (a *cased* PubMed vocabulary against an *uncased*
general one), changes more than the vocabulary. Here four vocabularies differ only in their text and casing:

* each is a WordPiece vocabulary of the same size trained by ``mwb tokenizer train`` on the **same number of
  words**: PubMed abstracts (``pubmed21n1298``) for ``bio-*``, the bundled Wikipedia extract (99 articles,
  ``mwb/retrieval/bundled/wiki_passages.tsv.gz``) for ``general-*``. Wikipedia rather than the bundled
  Shakespeare because BERT's general vocabulary, the paper's baseline, was learned from Wikipedia and books:
  encyclopaedic modern English, not Early Modern verse;
* each cased and uncased (``--lowercase``), so casing is crossed with domain (4 conditions);
* each then tokenizes the same PubMed abstracts, and the same BERT shape is pretrained on them for the same
  steps, fine-tuned with ``mwb finetune ner`` on the same silver chemical set (``mwb data silver-ner``: a
  citation's own ChemicalList names tagged in its abstract, from ``pubmed20n0014``, which neither the
  vocabularies nor the pretraining read) and scored on its held-out test split with ``mwb eval ner``.

Seeds: a cell is one seed of one vocabulary, and the seed drives both its pretraining and its fine-tuning
(nothing is shared between seeds), so the spread over seeds includes pretraining's. The vocabulary is trained
in every cell (seconds); the vocabulary statistics (``mwb tokenizer report``: pieces per word and words kept
whole on held-out abstracts, chemical mentions of the silver training split kept whole and their pieces per
word, the paper's Table 3 rate) are measured in the first seed's cell: they do not depend on the seed.
"""
from __future__ import annotations

import functools
import json
import os

from mwb.core.errors import DataError
from mwb.evaluation.predictions import FILENAME as PREDICTIONS_FILE
from mwb.evaluation.predictions import read_predictions
from mwb.retrieval.inputs import BUNDLED_EVIDENCE

from ..api import LOGGING, CellResult, Comparison, DataOption, Experiment, Paper, PaperValue, PlanSpec, Scale
from ..registry import register
from . import biomegatron_scales as bs

SHIN = Paper("Shin et al. 2020", "2010.06060", "BioMegatron: Larger Biomedical Domain Language Model")
CONDITIONS = ("general-cased", "general-uncased", "bio-cased", "bio-uncased")
NER_METRICS = ("f1", "precision", "recall")
VOCAB_METRICS = ("pieces_per_word", "words_whole", "terms_whole", "term_pieces_per_word")

T1 = ("Shin et al. 2020, Table 1, BC5CDR-chem test entity F1 (conlleval; gold labels, not silver), fine-tuned "
      "30 epochs at lr 5e-5, max-seq-length 128: ")
T3 = "Shin et al. 2020, Table 3, #tokens/#words of the named entities in the BC5CDR-chem training set: "
PAPER_VALUES = (
    PaperValue("bio-cased", "f1", 0.929, T1 + "BioMegatron 345m, Bio-vocab-30k (cased, SentencePiece on PubMed), "
               "pretrained from scratch on PubMed"),
    PaperValue("general-cased", "f1", 0.921, T1 + "BioMegatron 800m, BERT-cased vocabulary, from scratch on "
               "PubMed (the table prints no 345m general-vocabulary NER row: the paper's pairing also changes the "
               "model size)"),
    PaperValue("general-uncased", "f1", 0.913, T1 + "BioMegatron 1.2b, BERT-uncased vocabulary, continued from a "
               "general-domain Megatron checkpoint"),
    PaperValue("bio-cased", "term_pieces_per_word", 1.753, T3 + "BioMegatron-bio-30k-cased", headline=False),
    PaperValue("general-cased", "term_pieces_per_word", 3.012, T3 + "BERT-cased", headline=False),
    PaperValue("bio-uncased", "term_pieces_per_word", 1.654, T3 + "PubMedBERT-uncased (30k), the uncased PubMed "
               "vocabulary the table has (Gu et al. 2020's, not BioMegatron's)", headline=False),
)


def split(condition: str) -> tuple[str, bool]:
    """``bio-uncased`` → ("bio", True): the vocabulary's text domain and whether it is lower-cased."""
    domain, casing = condition.split("-")
    return domain, casing == "uncased"


@register("biomegatron")
class BioMegatron(Experiment):
    papers = (SHIN,)
    claim = ("A vocabulary learned from biomedical text gives higher biomedical NER F1 than a general-domain one of "
             "the same size and casing, with the same model, pretraining data and steps (Shin et al.'s "
             "Bio-vocab-30k-cased against the BERT-cased vocabulary on BC5CDR-chem).")
    conditions = CONDITIONS
    metrics = NER_METRICS + VOCAB_METRICS
    comparisons = (
        Comparison("general-cased", "bio-cased", "f1", "greater", headline=True),
        Comparison("general-uncased", "bio-uncased", "f1", "greater"),
        # docs/biomedical.md's confounded pairing (vocabulary and casing both change), kept to show its effect
        Comparison("general-uncased", "bio-cased", "f1", "greater"),
    )
    paper_values = PAPER_VALUES
    scales = bs.SCALES
    paper_options = {
        "pubmed_text": DataOption("biomedical text for the bio vocabularies and for pretraining: PubMed abstracts "
                                  "(+ PMC full text), any `mwb preprocess` input (.xml.gz, .jsonl, .txt)"),
        "general_text": DataOption("general-domain text for the general vocabularies (BERT's: Wikipedia + "
                                   "BooksCorpus), any `mwb preprocess` input"),
        "ner_data": DataOption("BC5CDR-chem in the BioBERT layout (train.tsv, devel.tsv, test.tsv)"),
        "heldout_text": DataOption("held-out biomedical text for the vocabulary statistics (e.g. "
                                   "pubmed20n0014.xml.gz of `mwb data fetch medline`)"),
        "terms": DataOption("entity terms, one per line (e.g. the BC5CDR-chem training mentions) for the share "
                            "kept whole and Table 3's pieces per word; 'none' to skip", default="none"),
    }

    def plan_specs(self, scale: Scale) -> tuple:
        """BioMegatron-345m (BERT-large's shape) pretrained for about one epoch of its 6.1B-word corpus."""
        p = scale.params
        return (PlanSpec("Shin et al. 2020: BioMegatron 345m, one epoch of PubMed abstracts + PMC-CC (6.1B "
                         "words ≈ 8e9 tokens) per vocabulary and seed; batch 1,024 × 512 as Megatron-LM's BERT, "
                         "64 A100-80GB assumed (the paper states neither)",
                         "bert-large", 64, p["pt_batch"], p["pt_seq"], train_tokens=8e9, precision=p["precision"]),)

    # ------------------------------------------------------------------------------------------ one cell

    def inputs(self, condition: str, scale: Scale, options: dict) -> dict:
        """The files a cell reads: vocabulary text, pretraining text, held-out text, NER data (None: the
        silver set the cell builds), terms (None: the silver training mentions; "" none)."""
        domain, _ = split(condition)
        if scale.name == "paper":
            terms = options["terms"]
            return {"vocab_text": options["pubmed_text" if domain == "bio" else "general_text"],
                    "pubmed": options["pubmed_text"], "heldout": options["heldout_text"],
                    "ner": options["ner_data"], "terms": "" if terms == "none" else terms}
        pubmed = _pubmed_file()
        return {"vocab_text": pubmed if domain == "bio" else BUNDLED_EVIDENCE, "pubmed": pubmed,
                "heldout": os.path.join(os.path.dirname(pubmed), scale.params["heldout"]), "ner": None,
                "terms": None}

    def cell_commands(self, condition, seed, scale, cell_dir, options) -> list:
        p, files = scale.params, self.inputs(condition, scale, options)
        _, lower = split(condition)

        def at(*parts):
            return os.path.join(cell_dir, *parts)

        precision = ["--precision", p["precision"]] if p.get("precision") else []
        cmds, ner, terms = [], files["ner"], files["terms"]
        if ner is None:
            ner, terms = at("ner"), at("ner", "train_mentions.txt")
            cmds.append(["mwb", "data", "silver-ner", "--out", ner, "--sizes", ",".join(map(str, p["silver"]))])
        train = ["mwb", "tokenizer", "train", "--type", "wordpiece", "--vocab-size", str(p["vocab_size"])]
        train += (["--lowercase"] if lower else []) + (["--max-words", str(p["max_words"])] if p["max_words"] else [])
        cmds.append(train + ["--out", at("vocab"), files["vocab_text"]])
        if seed == 0:
            cmds.append(["mwb", "tokenizer", "report", at("vocab"), "--text", files["heldout"]]
                        + (["--terms", terms] if terms else []) + ["--json", at("vocab_report.json")])
        pre = ["mwb", "preprocess", "--input", files["pubmed"], "--tokenizer", at("vocab"), "--output-prefix",
               at("pt", "pubmed"), "--split-sentences", "--workers", str(p["workers"]), "--no-progress"]
        cmds.append(pre + (["--max-docs", str(p["pt_docs"])] if p["pt_docs"] else []))
        cmds.append(["mwb", "pretrain", "bert", "--preset", p["preset"], *bs.sets(p["model"]),
                     "--set", f"model.vocab_size={p['vocab_size']}", "--data", at("pt", "pubmed_text_sentence"),
                     "--tokenizer", at("vocab"), "--steps", str(p["pt_steps"]), "--global-batch-size",
                     str(p["pt_batch"]), "--micro-batch-size", str(p["pt_micro"]), "--seq-length", str(p["pt_seq"]),
                     "--set", f"optim.decay_steps={p['pt_steps']}", "--set", f"optim.warmup_steps={p['pt_warmup']}",
                     "--lr", str(p["pt_lr"]), *precision, "--eval-interval", "0", "--seed", str(seed), *LOGGING,
                     "--out", at("pretrain")])
        cmds.append(["mwb", "finetune", "ner", "--checkpoint", at("pretrain"), "--data", ner, "--epochs",
                     str(p["ft_epochs"]), "--lr", str(p["ft_lr"]), "--global-batch-size", str(p["ft_batch"]),
                     "--micro-batch-size", str(p["ft_batch"]), "--seq-length", str(p["ft_seq"]), "--seed", str(seed),
                     *precision, "--keep-last", "1", *LOGGING, "--out", at("finetune")])
        cmds.append(["mwb", "eval", "ner", "--checkpoint", at("finetune"), "--data", ner, "--split", "test",
                     "--batch-size", "32", "--out", cell_dir])
        return cmds

    def read_cell(self, condition, seed, scale, cell_dir) -> CellResult:
        """The test split's NER metrics and records (``mwb eval ner``), the vocabulary statistics (first seed),
        and as details the dev F1 of the fine-tuning's best epoch and the pretraining's last MLM loss."""
        metrics = {m: v for m, v in _json(os.path.join(cell_dir, "results.json"))["metrics"].items()
                   if m in NER_METRICS}
        missing = [m for m in NER_METRICS if m not in metrics]
        if missing:
            raise DataError(f"{cell_dir}/results.json has no metric {missing[0]!r}")
        details = {}
        report = os.path.join(cell_dir, "vocab_report.json")
        if os.path.isfile(report):
            (row,) = _json(report).values()
            metrics.update({m: float(row[m]) for m in VOCAB_METRICS if m in row})
            details["vocabulary"] = row
        details["dev_f1_best_epoch"] = _json(os.path.join(cell_dir, "finetune", "results.json"))["metrics"].get("f1")
        details["pretrain_last_mlm_loss"] = bs.last_train_value(os.path.join(cell_dir, "pretrain", "metrics.jsonl"),
                                                                "lm_loss")
        return CellResult(metrics, read_predictions(os.path.join(cell_dir, PREDICTIONS_FILE)), details)

    # ---------------------------------------------------------------------------------------- reporting

    def scope(self, scale: Scale) -> str:
        return bs.scope(scale)

    def plot(self, results: dict, path: str) -> bool:
        bs.plot(results, path)
        return True


@functools.lru_cache(maxsize=1)
def _pubmed_file() -> str:
    """The MEDLINE file PubMed pretraining reads (``mwb data fetch medline``), looked up once per process."""
    from mwb.core.data.pubmed import TRAIN_FILE, medline_file
    return medline_file(TRAIN_FILE)


def _json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise DataError(f"biomegatron: cannot read {path} ({e})") from e
