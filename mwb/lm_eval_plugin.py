"""Makes a bare ``lm_eval --model mwb`` work in lm-eval releases that do not read model entry points.

Why a start-up hook: ``pip install mwb lm-eval`` should be enough for ``lm_eval --model mwb`` (issue 47).
mwb declares the ``lm_eval.models`` entry point, but lm-eval 0.4.13 (the newest release) never scans that
group: its registry knows only the names in ``lm_eval/models/__init__.py``. So the wheel installs
``mwb_lm_eval.pth``, whose one line imports this module at interpreter start. This module imports nothing
of mwb, torch or lm-eval: it puts one finder on ``sys.meta_path`` that waits for ``lm_eval.api.registry`` to
be imported and then registers ``mwb`` in lm-eval's own model registry as a *lazy placeholder*
(``"mwb.evaluation.lm_eval_backend:MwbLM"``, the same target as the entry point), so nothing of mwb is loaded
unless ``--model mwb`` is asked for. In an interpreter that never imports lm-eval it costs one finder call
per import and nothing else; after it has fired it removes itself.

It imports no more than ``importlib.machinery`` (already loaded by Python itself), so the start-up cost is
that of reading one small module. It never raises at start-up: an lm-eval whose registry differs (no ``model_registry``) is left alone, and
``mwb-lm-eval`` still works there.
"""
from __future__ import annotations

import importlib.machinery
import sys

REGISTRY_MODULE = "lm_eval.api.registry"
TARGET = "mwb.evaluation.lm_eval_backend:MwbLM"


def register(registry_module) -> bool:
    """Registers ``mwb`` → :data:`TARGET` in ``registry_module.model_registry`` unless a model of that name
    is there already; whether the name is now known."""
    registry = getattr(registry_module, "model_registry", None)
    if registry is None or not hasattr(registry, "register"):
        return False
    if "mwb" not in registry:
        registry.register("mwb", target=TARGET)
    return True


class _RegisteringLoader:
    """``loader`` as it is, and :func:`register` once the registry module has run."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            register(module)
        except Exception:  # noqa: BLE001 - an import hook must not break lm-eval's own import
            pass

    def __getattr__(self, name):  # get_source, get_resource_reader, ...: the real loader's
        return getattr(self._loader, name)


class _RegistryFinder:
    """Finds nothing itself: for :data:`REGISTRY_MODULE` it asks the other finders and wraps the loader."""

    def find_spec(self, fullname, path, target=None):
        if fullname != REGISTRY_MODULE:
            return None
        uninstall()
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                spec = find(fullname, path, target) if find else None
                if spec is not None and spec.loader is not None:
                    break
            else:
                return None
        spec.loader = _RegisteringLoader(spec.loader)
        return spec


_FINDER = _RegistryFinder()


def install() -> None:
    """Puts the finder first on ``sys.meta_path`` (once); registers at once if lm-eval is already imported."""
    module = sys.modules.get(REGISTRY_MODULE)
    if module is not None:
        register(module)
    elif _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


install()
