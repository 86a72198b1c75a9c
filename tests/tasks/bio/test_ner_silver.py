"""The silver chemical NER builder: a citation's own listed chemicals tagged in its abstract, BioBERT layout."""
import gzip

from mwb.tasks.bio.ner import NER
from mwb.tasks.bio.ner_silver import tag_citation, write_silver_ner
from tests.core.data.test_medline import XML


def test_tags_own_chemicals_longest_first_case_insensitive():
    sents = tag_citation("Sodium chloride and sodium were given. Then cisplatin-induced injury.",
                         ["Sodium", "Sodium Chloride", "Cisplatin"])
    assert sents[0] == (["Sodium", "chloride", "and", "sodium", "were", "given", "."],
                        ["B", "I", "O", "B", "O", "O", "O"])
    assert sents[1][1][:2] == ["O", "B"] and sents[1][0][1] == "cisplatin"


def test_writes_a_biobert_folder_the_ner_task_reads(tmp_path):
    path = tmp_path / "pubmed_sample.xml.gz"
    path.write_bytes(gzip.compress(XML.encode()))
    counts = write_silver_ner([str(path)], str(tmp_path / "silver"), sizes=(1, 0, 0))
    assert counts["train"] == {"citations": 1, "sentences": 3, "mentions": 3}  # title + 2 abstract sentences
    task = NER()
    task.prepare(str(tmp_path / "silver"))
    assert task.labels == ["O", "B"]
    rows = task.read(str(tmp_path / "silver"), "train")
    assert rows[1]["words"][:2] == ["Cisplatin", "causes"] and rows[1]["tags"][:2] == ["B", "O"]
