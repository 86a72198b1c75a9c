"""``--tokenizer gpt2`` finds GPT-2's ranks through the one package-data resolver: what ``mwb data fetch
gpt2-ranks`` puts in ``$MWB_CACHE`` is what the tokenizer reads, and nothing else is looked up.

The fetch runs pip for real, offline: pip's index is switched off and pointed at a folder holding the
openai-whisper sdist copied from the test cache (``.ci/run`` downloads it there)."""
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from mwb.core.data import package_files
from mwb.core.errors import DataError
from mwb.core.tokenizers import load_tokenizer, tiktoken_bpe
from tests.helpers.needs import needs

SDIST = os.path.join(os.environ.get("MWB_CACHE", ".pytest_mwb_cache"), "openai_whisper-20250625.tar.gz")


def _fresh_cache(tmp_path, monkeypatch):
    """An empty $MWB_CACHE and working directory, and no installed openai-whisper: only a fetch can help."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("MWB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(package_files, "installed_member", lambda src: None)
    return cache


def test_before_fetch_one_line_names_the_fetch(tmp_path, monkeypatch):
    _fresh_cache(tmp_path, monkeypatch)
    assert not package_files.available(tiktoken_bpe.GPT2_SOURCE)
    with pytest.raises(DataError, match="mwb data fetch gpt2-ranks") as e:
        load_tokenizer("gpt2")
    assert "\n" not in str(e.value)


@needs(data=["gpt2-ranks"])
@pytest.mark.skipif(not os.path.isfile(SDIST), reason=f"{SDIST} absent (see .ci/run)")
@pytest.mark.skipif(importlib.util.find_spec("setuptools") is None, reason="pip needs setuptools to read an sdist")
def test_gpt2_reads_what_mwb_data_fetch_fetched(tmp_path, monkeypatch):
    cache = _fresh_cache(tmp_path, monkeypatch)
    links = tmp_path / "links"
    links.mkdir()
    shutil.copy(SDIST, links)
    env = dict(os.environ, MWB_CACHE=str(cache), PIP_NO_INDEX="1", PIP_FIND_LINKS=str(links),
               PIP_NO_BUILD_ISOLATION="0")  # pip's spelling of --no-build-isolation: no build deps to fetch
    proc = subprocess.run([sys.executable, "-m", "mwb", "data", "fetch", "gpt2-ranks"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert os.listdir(cache / "packages") and os.path.isfile(cache / "packages" / os.path.basename(SDIST))
    ranks = tiktoken_bpe.find_gpt2_ranks()
    assert ranks.startswith(str(cache / "packages")) and ranks.endswith("whisper/assets/gpt2.tiktoken")
    assert ranks in proc.stdout  # the path `mwb data fetch` reported is the one the tokenizer reads
    tok = load_tokenizer("gpt2")
    assert tok.encode("Hello world") == [15496, 995] and tok.vocab_size == 50257
