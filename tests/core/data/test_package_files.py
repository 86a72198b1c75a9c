"""package_path finds a member in an archive put in $MWB_CACHE, extracts it once, and says how to fetch it."""
import os
import tarfile
import zipfile

import pytest

from mwb.core.data import package_files as pf
from mwb.core.errors import DataError


def _sources(monkeypatch, **kw):
    monkeypatch.setattr(pf, "SOURCES", dict(kw))


def test_sdist_member_extracted_once_without_top_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    os.makedirs(tmp_path / "cache" / "packages")
    src = tmp_path / "Fake-Pkg-1.2"
    (src / "fake_pkg" / "data").mkdir(parents=True)
    (src / "fake_pkg" / "data" / "a.txt").write_text("hello")
    (src / "fake_pkg" / "other.py").write_text("x")
    with tarfile.open(tmp_path / "cache" / "packages" / "Fake-Pkg-1.2.tar.gz", "w:gz") as t:
        t.add(src, arcname="Fake-Pkg-1.2")
    _sources(monkeypatch, fake=pf.PackageData("fake", "fake-pkg", "1.2", "fake_pkg/data", "fake data", "MIT", True))
    assert pf.available("fake")
    path = pf.package_path("fake")
    assert open(os.path.join(path, "a.txt")).read() == "hello"
    assert not os.path.exists(os.path.join(os.path.dirname(path), "other.py"))
    assert pf.package_path("fake") == path  # reused


def test_wheel_file_member(tmp_path, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path))
    with zipfile.ZipFile(tmp_path / "fake_pkg-1.2-py3-none-any.whl", "w") as z:
        z.writestr("fake_pkg/data.json", "[1]")
    _sources(monkeypatch, fake=pf.PackageData("fake", "fake-pkg", "1.2", "fake_pkg/data.json", "fake data", "MIT"))
    assert open(pf.package_path("fake")).read() == "[1]"


def test_missing_says_how_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    _sources(monkeypatch, fake=pf.PackageData("fake", "fake-pkg", "9.9", "x", "fake data", "MIT"))
    assert not pf.available("fake")
    with pytest.raises(DataError, match="mwb data fetch fake"):
        pf.package_path("fake")
    with pytest.raises(DataError, match="unknown package data"):
        pf.package_path("nope")
