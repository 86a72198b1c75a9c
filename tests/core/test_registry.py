"""The one Registry type behind tasks and experiments: lowercase names, aliases, one registration per name,
discovery once, and an unknown name as one usage error naming the known ones and the modules that failed."""
import pytest

from mwb.core.config import ConfigError
from mwb.core.registry import Registry


class Alpha:
    pass


class Beta:
    pass


def test_names_aliases_and_sorted_listing():
    reg = Registry("thing")
    assert reg.add("Zeta", Beta) == "zeta"
    assert reg.add("Alpha", Alpha, aliases=("A1",)) == "alpha"
    assert reg.get("ALPHA") is Alpha and reg.get("a1") is Alpha and reg.get("zeta") is Beta
    assert list(reg.all()) == ["alpha", "zeta"]
    reg.add("alpha", Alpha)  # the same class again (a module imported twice) is no error
    reg.remove("Zeta")
    assert list(reg.all()) == ["alpha"]


def test_a_name_taken_by_another_class_names_both_modules():
    reg = Registry("thing")
    reg.add("x", Alpha)
    with pytest.raises(ValueError, match=rf"thing 'x' is registered twice \({__name__}, {__name__}\)"):
        reg.add("X", Beta)
    assert reg.get("x") is Alpha
    inst = object()
    reg.add("y", inst, source=Beta)  # an instance registered under its class
    with pytest.raises(ValueError, match="registered twice"):
        reg.claim("y", Alpha)
    assert reg.claim("y", Beta) == "y"


def test_discovery_runs_once_and_failures_are_named_in_the_unknown_name_error():
    calls = []
    reg = Registry("experiment", lambda: calls.append(1) or reg.record_failure("broken", ImportError("no extra")),
                   module_prefix="pkg.experiments.")
    reg.add("one", Alpha)
    assert calls == []  # nothing discovered before the first lookup
    with pytest.raises(ConfigError) as e:
        reg.get("nope")
    assert str(e.value) == ("unknown experiment 'nope' (known: one); pkg.experiments.broken failed to import "
                            "(ImportError: no extra)")
    reg.all()
    reg.get("one")
    assert calls == [1]


def test_an_empty_registry_says_none():
    with pytest.raises(ConfigError, match=r"^unknown task 'a' \(known: none\)$"):
        Registry("task").get("a")
