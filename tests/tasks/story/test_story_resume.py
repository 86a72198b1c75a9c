"""``mwb finetune story`` rerun with the same ``--out``: the stages that finished are skipped, a stage whose outputs
are there but half-written (no marker, a results file cut short) is done again, and the run ends with the results
of the uninterrupted run; a rerun with other settings is refused rather than mixing two runs' stages."""
import json
import os
import shutil

from tests.helpers.checkpoints import tiny_checkpoint
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs

NAMES = [("Tom", "dog"), ("Ann", "cat"), ("Bob", "bird"), ("Eve", "fish"), ("Sam", "horse")]
ROC = "storyid,storytitle,sentence1,sentence2,sentence3,sentence4,sentence5\n" + "".join(
    f"s{i},T{i},{n} had a {p}.,The {p} ran to the river.,{n} looked for the {p}.,{n} found it by a tree.,"
    f"{n} was happy.\n" for i, (n, p) in enumerate(NAMES * 8))
CONCEPTNET = [("/r/IsA", "dog", "animal"), ("/r/AtLocation", "river", "valley"), ("/r/IsA", "cat", "pet"),
              ("/r/CapableOf", "bird", "fly"), ("/r/AtLocation", "tree", "forest"), ("/r/IsA", "horse", "animal"),
              ("/r/CapableOf", "fish", "swim"), ("/r/HasProperty", "happy", "good")]


def _metrics(out):
    return json.load(open(os.path.join(out, "results.json")))["metrics"]


@needs(models=["minilm-l6"])  # the knowledge ranker starts from MiniLM
def test_rerun_skips_finished_stages_and_redoes_a_half_written_one(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    ckpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=64, num_layers=1, hidden_size=32,
                           num_attention_heads=2)
    (tmp_path / "roc.csv").write_text(ROC)
    cn = tmp_path / "assertions.csv"
    cn.write_text("".join(f"/a/{i}\t{r}\t/c/en/{a}\t/c/en/{b}\t{json.dumps({'weight': 1.0})}\n"
                          for i, (r, a, b) in enumerate(CONCEPTNET)))
    out = str(tmp_path / "story")
    argv = ["finetune", "story", "--checkpoint", ckpt, "--data", str(tmp_path / "roc.csv"), "--conceptnet", str(cn),
            "--train-stories", "4", "--dev-stories", "2", "--ranker-steps", "1", "--generator-epochs", "1",
            "--global-batch-size", "4", "--micro-batch-size", "4", "--seq-length", "64", "--lr", "1e-3",
            "--set", "logging.progress=false", "--out", out]
    code, _, err = run_cli(argv, capsys)
    assert code in (0, None), err
    want = _metrics(out)
    assert {"ranker_loss_first", "keywords_dev_loss", "generator_dev_loss"} <= set(want)

    # every stage finished: nothing is done again
    ranker = os.path.join(out, "ranker", "metadata.json")
    stamp = {p: os.path.getmtime(p) for p in (ranker, os.path.join(out, "keywords", "results.json"),
                                              os.path.join(out, "generator", "results.json"))}
    code, _, err = run_cli(argv, capsys)
    assert code in (0, None), err
    assert err.count("finished earlier") == 3 and "fine-tuning the" not in err
    assert {p: os.path.getmtime(p) for p in stamp} == stamp and _metrics(out) == want

    # the generator half-written (killed before its marker, its results cut short): done again, the rest skipped
    os.remove(os.path.join(out, "stages", "generator.json"))
    res = os.path.join(out, "generator", "results.json")
    text = open(res).read()
    open(res, "w").write(text[: len(text) // 2])
    shutil.rmtree(os.path.join(out, "generator", "checkpoints"))
    code, _, err = run_cli(argv, capsys)
    assert code in (0, None), err
    assert err.count("finished earlier") == 2 and "fine-tuning the generator GPT" in err
    assert os.path.getmtime(ranker) == stamp[ranker]
    assert _metrics(out) == want  # the same results as the uninterrupted run

    # other settings on the same --out: refused, not mixed
    code, _, err = run_cli([*argv[:-2], "--top-n", "2", "--out", out], capsys)
    assert code == 2 and "other settings" in err and len(err.strip().splitlines()) == 1
