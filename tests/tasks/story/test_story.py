"""MEGATRON-CNTRL story parts: readers, RAKE, knowledge templates, ConceptNet, metrics, ranker agreement."""
import json

import numpy as np
import pytest

from mwb.core.errors import DataError
from mwb.tasks.story.data import Story, delexicalize_names, read_stories, read_story_file, split_of
from mwb.tasks.story.generator import StoryGenerator, generator_prompt
from mwb.tasks.story.keywords import format_keywords, parse_control, parse_keywords
from mwb.tasks.story.knowledge import ConceptNet, Triple, read_conceptnet, render
from mwb.tasks.story.metrics import has_repeat, repeat_n, story_distinct, words
from mwb.tasks.story.ranker import agreement
from tests.helpers.needs import needs

ROC = ("storyid,storytitle,sentence1,sentence2,sentence3,sentence4,sentence5\n"
       "s1,Cake,Jenny wanted a cake.,She bought flour.,She baked it.,It burned.,Jenny laughed.\n"
       "s2,Dog,Tom had a dog.,The dog ran away.,Tom looked for it.,He found it.,Tom was happy.\n")
CLOZE = ("InputStoryid\tInputSentence1\tInputSentence2\tInputSentence3\tInputSentence4\t"
         "RandomFifthSentenceQuiz1\tRandomFifthSentenceQuiz2\tAnswerRightEnding\n"
         "c1\tAnn went out.\tIt rained.\tShe got wet.\tShe went home.\tShe was dry.\tShe changed clothes.\t2\n")


def test_readers_take_both_layouts_and_fixed_splits(tmp_path):
    (tmp_path / "roc.csv").write_text(ROC)
    (tmp_path / "cloze.tsv").write_text(CLOZE)
    s = read_story_file(str(tmp_path / "roc.csv"))
    assert s[0] == Story("s1", ("Jenny wanted a cake.", "She bought flour.", "She baked it.", "It burned.",
                                "Jenny laughed."), "Cake")
    c = read_story_file(str(tmp_path / "cloze.tsv"))
    assert c[0].sentences[-1] == "She changed clothes." and len(c[0].sentences) == 5  # the right ending
    every = read_stories(str(tmp_path))
    assert [x.id for x in every] == ["c1", "s1", "s2"]
    by_split = {sp: [x.id for x in read_stories(str(tmp_path), sp)] for sp in ("train", "dev", "test")}
    assert sorted(sum(by_split.values(), [])) == ["c1", "s1", "s2"]
    assert all(split_of(x) == sp for sp, ids in by_split.items() for x in ids)
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(DataError, match="not a ROCStories CSV"):
        read_story_file(str(tmp_path / "bad.csv"))
    with pytest.raises(DataError, match="not found"):
        read_stories(str(tmp_path / "missing.csv"))


def test_delexicalisation_replaces_names_in_order():
    stories = [Story("a", ("Jenny met Tom.", "Tom liked Jenny's cake.", "They ate.", "The cake was good.", "Yes.")),
               Story("b", ("I saw Tom.", "It was Monday.", "Go.", "Stop.", "End."))]
    out = delexicalize_names(stories)
    assert out[0].sentences[:2] == ("[NAME1] met [NAME2].", "[NAME2] liked [NAME1]'s cake.")
    assert out[0].sentences[3] == "The cake was good."  # sentence-initial common words stay


@needs("rake_nltk")
def test_rake_scores_match_hand_computation():
    from mwb.tasks.story.keywords import rake_scores, sentence_keywords
    # phrases "big dog chased", "small dog"; word degree/frequency: big 3/1, chased 3/1, small 2/1, dog (3+2)/2
    assert rake_scores("The big dog chased the small dog.") == [("big dog chased", 3 + 2.5 + 3),
                                                                ("small dog", 2 + 2.5)]
    # "friend's": the contraction tail "s" is a stopword; laverne needs: 2 + 2
    assert rake_scores("Laverne needs to prepare something for her friend's party.") == \
        [("laverne needs", 4.0), ("prepare", 1.0), ("friend", 1.0), ("party", 1.0)]
    assert sentence_keywords("It was 5. Tom slept.", 2) == ["tom slept"]  # "5" has no letter: no keyword


def test_keyword_strings():
    assert parse_keywords(format_keywords(["cake", "oven"])) == ["cake", "oven"]
    assert parse_control("cake, oven;dog") == [["cake", "oven"], ["dog"], [], []]
    with pytest.raises(DataError):
        parse_control("a;b;c;d;e")


def test_templates_and_conceptnet_reader(tmp_path):
    assert render(Triple("dog", "IsA", "animal")) == "Dog is a kind of animal."
    assert render(Triple("hammer", "UsedFor", "hitting nails")) == "Hammer is used for hitting nails."
    assert render(Triple("book", "AtLocation", "library")) == "You are likely to find book in library."
    assert render(Triple("bird", "CapableOf", "fly")) == "Bird can fly."
    assert render(Triple("hot", "Antonym", "cold")) == "Hot is the opposite of cold."
    assert render(Triple("cake", "HasSubevent", "eating")) == "Cake has subevent eating."  # no template
    rows = [
        ("/a/[/r/IsA/,/c/en/dog/n/,/c/en/animal/]", "/r/IsA", "/c/en/dog/n", "/c/en/animal",
         {"weight": 2.0, "surfaceText": "[[a dog]] is [[an animal]]"}),
        ("/a/2", "/r/UsedFor", "/c/en/hammer", "/c/en/hitting_nails", {"weight": 1.0}),
        ("/a/3", "/r/AtLocation", "/c/en/book", "/c/en/library", {"weight": 1.0}),
        ("/a/4", "/r/CapableOf", "/c/en/bird", "/c/en/fly/v", {"weight": 1.0}),
        ("/a/5", "/r/Antonym", "/c/en/hot", "/c/en/cold", {"weight": 1.0}),
        ("/a/6", "/r/IsA", "/c/fr/chien", "/c/fr/animal", {"weight": 1.0}),
        ("/a/7", "/r/Synonym", "/c/en/dog", "/c/de/hund", {"weight": 1.0}),
    ]
    path = tmp_path / "assertions.csv"
    path.write_text("".join("\t".join([*r[:4], json.dumps(r[4])]) + "\n" for r in rows))
    triples = read_conceptnet(str(path))
    assert len(triples) == 5  # the French edge and the English→German edge are dropped
    assert [render(t) for t in triples] == ["A dog is an animal.", "Hammer is used for hitting nails.",
                                           "You are likely to find book in library.", "Bird can fly.",
                                           "Hot is the opposite of cold."]
    kb = ConceptNet(str(path))
    assert [t.relation for t in kb.triples("hitting nails")] == ["UsedFor"] and kb.triples("chien") == []
    (tmp_path / "bad.csv").write_text("a\tb\n")
    with pytest.raises(DataError, match="5 tab-separated"):
        read_conceptnet(str(tmp_path / "bad.csv"))


def test_distinct_and_repeat_by_hand():
    assert words("He's home, Tom.") == ["he's", "home", ",", "tom", "."]
    a, b = "a b c d e", "a b c d a b c d"
    # 4-grams: a: (abcd, bcde); b: (abcd, bcda, cdab, dabc, abcd) -> 7 in all, distinct {abcd,bcde,bcda,cdab,dabc}
    assert story_distinct([a, b], 4) == pytest.approx(5 / 7)
    assert not has_repeat(words(a), 4) and has_repeat(words(b), 4)
    assert repeat_n([a, b, a], 4) == pytest.approx(1 / 3)


@needs(data=["wordnet"])
def test_wordnet_knowledge_and_keyword_inclusion():
    from mwb.tasks.story.knowledge import WordNet, base_forms, knowledge_sentences
    from mwb.tasks.story.metrics import included, keyword_inclusion
    kb = WordNet()
    dog = [render(t) for t in kb.triples("dog")]
    assert "Dog is a kind of canine." in dog and "Dog means the same as domestic dog." in dog
    assert "Hot is the opposite of cold." in [render(t) for t in kb.triples("hot")]
    assert knowledge_sentences(kb, ["dog", "cake"], limit=3)[:2] == [dog[0], render(kb.triples("cake")[0])]
    assert {"brownie", "brownies"} <= base_forms("brownies") and "bake" in base_forms("baked")
    assert included("brownie", "She baked brownies.") and included("bake", "She baked brownies.")
    assert not included("oven", "She baked brownies.")
    assert keyword_inclusion([(["cake", "oven"], "The cakes were good."), (["dog"], "A dog.")]) == pytest.approx(2 / 3)


class _FixedScores:
    def __init__(self, scores):
        self._scores = scores

    def scores(self, queries, candidates):
        return [np.asarray(s) for s in self._scores]


def test_ranker_agreement_by_hand():
    ex = [{"context": "x", "candidates": list("abcd"), "labels": [0.9, 0.1, 0.8, 0.0]},
          {"context": "y", "candidates": list("abcd"), "labels": [0.0, 0.1, 0.2, 0.3]},
          {"context": "z", "candidates": list("ab"), "labels": [1.0, 0.0]}]  # not more than n candidates: skipped
    fake = _FixedScores([[1.0, 0.9, 0.0, 0.1], [0.0, 0.1, 0.2, 0.3]])
    got = agreement(fake, ex, 2)
    # top-2 by ranker {a, b} vs labels {a, c}: 1/2; second: {c, d} vs {c, d}: 1
    assert got["top_n_agreement"] == pytest.approx(0.75) and got["chance"] == pytest.approx(0.5)
    assert got["examples"] == 2


def test_generator_prompt_with_and_without_knowledge():
    ex = {"context": "Tom had a dog.", "target": "It ran.", "knowledge": ["Dog is a kind of canine."]}
    assert StoryGenerator().inputs(ex, None, 0) == {
        "prompt": "Knowledge: Dog is a kind of canine.\nStory: Tom had a dog.\nNext:", "target": " It ran."}
    assert StoryGenerator(knowledge=False).inputs(ex, None, 0)["prompt"] == generator_prompt("Tom had a dog.")


def _story_rows(n: int) -> list[dict]:
    ctx = ["Tom had a dog.", "Tom had a dog. The dog ran away.", "Ann baked a cake.", "Ann baked a cake. It burned."]
    nxt = ["The dog ran away.", "Tom looked for it.", "It burned.", "Ann laughed."]
    know = [["Dog is a kind of canine."], ["Look means the same as search."], ["Burn is a kind of change."],
            ["Laugh is a kind of utterance."]]
    return [{"story": f"s{i}", "position": 1, "context": ctx[i % 4], "target": nxt[i % 4],
             "keywords": [], "knowledge": know[i % 4]} for i in range(n)]


@pytest.mark.multiprocess
def test_story_generator_tp2_equals_one_process(tmp_path):
    """The generator's fine-tuning (knowledge + story so far → next sentence) under TP2 = one process."""
    from tests.helpers.checkpoints import tiny_checkpoint
    from tests.tasks.api.test_generative import _losses, _mwb
    ckpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=64, num_layers=2, hidden_size=64)
    data = tmp_path / "gen"
    data.mkdir()
    for split in ("train", "dev"):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _story_rows(8)))
    common = ["story-generator", "--checkpoint", ckpt, "--data", str(data), "--global-batch-size", "4",
              "--micro-batch-size", "2", "--epochs", "2", "--lr", "1e-3", "--max-tokens", "4",
              "--set", "logging.progress=false", "--set", "model.dropout=0"]
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    _mwb("finetune", *common, "--out", one)
    _mwb("finetune", *common, "--out", two, "--nproc", "2", "--tp", "2")
    a, b = _losses(one), _losses(two)
    assert len(a) == len(b) == 4 and a[-1] < a[0]
    assert max(abs(x - y) / abs(x) for x, y in zip(a, b)) < 1e-5, (a, b)


def test_story_commands_fail_with_one_line(tmp_path, capsys):
    from tests.helpers.cli import run_cli
    code, _, err = run_cli(["generate", "story", "--checkpoint", str(tmp_path)], capsys)
    assert code == 1 and "not a `mwb finetune story` run" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(["generate"], capsys)  # the plain command still needs --prompt
    assert code == 2 and "--prompt" in err


@needs(data=["wordnet"])  # the controlled stories' keyword inclusion counts WordNet base forms
def test_story_eval_keeps_the_written_stories_for_stories_jsonl():
    from mwb.tasks.story.task import StoryEval
    task = StoryEval()
    gold = [Story("a", ("Ann had a dog.", "It ran.", "It sat.", "It ate.", "It slept.")),
            Story("b", ("Bob had a cat.", "It hid.", "It ran.", "It sat.", "It purred."))]
    task.examples = gold
    free = ["First.", "the dog ran away", "it came back", "they were happy", "the end"]
    ctrl = ["First.", "the oven was hot", "the dog ran", "it slept", "the end"]
    results = [{"free": free, "controlled": ctrl, "control": [["oven"], ["dog"], ["cat"], ["moon"]], "nll": (4.0, 2)}
               for _ in gold]
    m = task.aggregate(results)
    assert m["inclusion_control"] == 0.5 and m["inclusion_no_control"] == 0.0  # oven, dog; none without
    rows = [json.loads(line) for line in task.files(m, task.records(results, gold), gold)["stories.jsonl"].splitlines()]
    assert [r["first"] for r in rows] == ["Ann had a dog.", "Bob had a cat."]
    assert rows[0]["controlled"] == ctrl and rows[1]["gold"] == list(gold[1].sentences) and rows[0]["control"][0] == ["oven"]


def test_first_story_skips_k_stories_and_refuses_a_window_past_the_split(tmp_path):
    """``--first-story K --stories N`` evaluates stories K..K+N-1 of the split (megatron-cntrl's disjoint sample
    per seed); a window that runs past the split is one DataError, not a shorter sample."""
    from mwb.tasks.story.task import StoryEval
    rows = "".join(f"s{i},T,A{i} went.,B.,C.,D.,E.\n" for i in range(12))
    (tmp_path / "roc.csv").write_text("storyid,storytitle,sentence1,sentence2,sentence3,sentence4,sentence5\n" + rows)
    every = [s.id for s in read_stories(str(tmp_path), "train")]
    assert len(every) >= 5, every
    got = StoryEval(stories=2, first_story=2, split="train").load(str(tmp_path))
    assert [s.id for s in got] == every[2:4]
    assert [s.id for s in StoryEval(stories=0, first_story=1, split="train").load(str(tmp_path))] == every[1:]
    with pytest.raises(DataError, match=f"--first-story {len(every) - 1} with --stories 2: the train split has "
                                        f"{len(every)} stories"):
        StoryEval(stories=2, first_story=len(every) - 1, split="train").load(str(tmp_path))
