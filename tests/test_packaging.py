"""Every tracked data file under mwb/ ships in the wheel.

setuptools copies a package's non-.py files only when they match a `[tool.setuptools.package-data]` glob, and it
says nothing about the ones that do not: the bundled NER and ChemProt samples (.tsv) were left out that way, so
`mwb finetune ner` without `--data` failed after a non-editable install. This test fails as soon as someone adds
a file with a new extension under mwb/ without a glob for it. `.ci/run` also builds the wheel and compares its
file list with `git ls-files mwb` (.ci/check_wheel.py).
"""
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def glob_regex(pattern: str) -> re.Pattern:
    """setuptools' package-data glob as a regex: `**/` is zero or more folders, `*` and `?` stay in one name."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files under mwb/ are unknown")
    listing = subprocess.run(["git", "ls-files", "mwb"], cwd=ROOT, capture_output=True, text=True)
    if listing.returncode != 0:
        pytest.skip(f"git ls-files failed: {listing.stderr.strip()}")
    return listing.stdout.split()


def test_glob_regex_follows_setuptools_semantics():
    rx = glob_regex("**/*.tsv")
    assert rx.match("train.tsv") and rx.match("tasks/bio/bundled/x/train.tsv")
    assert not rx.match("tasks/train.tsv.gz") and not rx.match("tasks/train_tsv")
    assert glob_regex("data/*.txt").match("data/a.txt") and not glob_regex("data/*.txt").match("data/b/a.txt")


def test_every_tracked_data_file_under_mwb_matches_a_package_data_glob():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = [glob_regex(g) for g in config["tool"]["setuptools"]["package-data"]["mwb"]]
    data = [p for p in tracked_files() if not p.endswith(".py")]
    assert len(data) > 100  # the bundled corpora, samples and READMEs: an empty listing would pass vacuously
    left_out = [p for p in data if not any(g.match(p.removeprefix("mwb/")) for g in globs)]
    assert left_out == [], f"not in the wheel (add a glob to pyproject.toml's package-data): {left_out}"
