"""Package data is fetched on first use with a one-line notice, through the same download `mwb data fetch`
runs; never when MWB_OFFLINE, HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set (the suite sets MWB_OFFLINE)."""
import os
import zipfile

import pytest

from mwb.core.data import package_files as pf
from mwb.core.errors import DataError

FAKE = pf.PackageData("fake", "fake-pkg", "1.2", "fake_pkg/data.json", "fake data", "MIT")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pf, "SOURCES", {"fake": FAKE})
    calls = []

    def pip(cmd):  # what `pip download -d DEST` leaves: the release's archive in DEST
        calls.append(cmd)
        dest = cmd[cmd.index("-d") + 1]
        with zipfile.ZipFile(os.path.join(dest, "fake_pkg-1.2-py3-none-any.whl"), "w") as z:
            z.writestr("fake_pkg/data.json", "[1]")
        return 0

    monkeypatch.setattr(pf.subprocess, "call", pip)
    return calls


def test_the_suite_runs_offline():
    assert os.environ.get("MWB_OFFLINE") == "1" and pf.offline()


@pytest.mark.parametrize("var", pf.OFFLINE_VARIABLES)
def test_any_offline_variable_stops_the_fetch(fake, monkeypatch, var):
    for v in pf.OFFLINE_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv(var, "1")
    with pytest.raises(DataError, match="run `mwb data fetch fake`") as e:
        pf.package_path("fake")
    assert "\n" not in str(e.value) and var in str(e.value) and fake == []


def test_online_first_use_fetches_once_with_a_notice(fake, monkeypatch, capsys):
    for v in pf.OFFLINE_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # a variable set to a false value does not stop it
    path = pf.package_path("fake")
    assert open(path).read() == "[1]" and len(fake) == 1
    cmd = fake[0]
    assert cmd[2:6] == ["pip", "download", "-q", "--no-deps"] and "fake-pkg==1.2" in cmd
    assert cmd[cmd.index("-d") + 1] == os.path.join(os.environ["MWB_CACHE"], "packages")
    notice = [line for line in capsys.readouterr().err.splitlines() if "PyPI" in line]  # (+ the extraction's)
    assert len(notice) == 1 and "fetching fake-pkg==1.2 from PyPI" in notice[0] and "MWB_OFFLINE=1" in notice[0]
    assert pf.package_path("fake") == path and len(fake) == 1  # the archive is in the cache now: no second fetch


def test_a_failed_download_is_one_line(fake, monkeypatch):
    for v in pf.OFFLINE_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(pf.subprocess, "call", lambda cmd: 1)
    with pytest.raises(DataError, match="pip could not download fake-pkg==1.2") as e:
        pf.package_path("fake")
    assert "\n" not in str(e.value)
