"""``mwb_lm_eval.pth`` + :mod:`mwb.lm_eval_plugin`: a bare ``lm_eval --model mwb`` after ``pip install mwb lm-eval``.

Each check runs in a fresh interpreter, where Python's ``site`` processes the ``.pth`` line as it does in
site-packages (``site.addsitedir`` of a folder holding the repository's ``.pth``), so they do not depend on how
this checkout was installed; ``test_installed_environment_has_the_pth`` checks the install itself."""
import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.needs import needs

ROOT = Path(__file__).resolve().parent.parent
PTH = ROOT / "mwb_lm_eval.pth"


def fresh(code: str, tmp_path) -> dict:
    """Runs ``code`` after ``site`` has read the ``.pth`` (copied into ``tmp_path``); its last line as JSON."""
    shutil.copy(PTH, tmp_path / PTH.name)
    prog = f"import site, sys, json; site.addsitedir({str(tmp_path)!r})\n{code}"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, timeout=300,
                         cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_pth_imports_only_the_small_hook(tmp_path):
    got = fresh("print(json.dumps({m: m in sys.modules for m in "
                "['mwb.lm_eval_plugin', 'mwb.evaluation', 'torch', 'lm_eval']}))", tmp_path)
    assert got == {"mwb.lm_eval_plugin": True, "mwb.evaluation": False, "torch": False, "lm_eval": False}


@needs("lm_eval")
def test_importing_lm_eval_registers_mwb_lazily(tmp_path):
    got = fresh("from lm_eval.api.registry import model_registry\n"
                "import lm_eval.models\n"
                "held = model_registry._objs['mwb']\n"
                "print(json.dumps({'held': held if isinstance(held, str) else repr(held),"
                " 'loaded': 'mwb.evaluation.lm_eval_backend' in sys.modules,"
                " 'hf': 'hf' in model_registry}))", tmp_path)
    assert got == {"held": "mwb.evaluation.lm_eval_backend:MwbLM", "loaded": False, "hf": True}


@needs("lm_eval")
def test_get_model_mwb_is_the_backend_class(tmp_path):
    got = fresh("from lm_eval.api.registry import get_model\n"
                "cls = get_model('mwb')\n"
                "print(json.dumps(f'{cls.__module__}:{cls.__qualname__}'))", tmp_path)
    assert got == "mwb.evaluation.lm_eval_backend:MwbLM"


def test_without_the_pth_mwb_is_not_registered(tmp_path):
    """The control: the registration comes from the ``.pth`` line, not from something else importing mwb."""
    pytest.importorskip("lm_eval")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = ("import sys\nsys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != '_RegistryFinder']\n"
            "from lm_eval.api.registry import model_registry\nprint('mwb' in model_registry)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_installed_environment_has_the_pth():
    """``pip install mwb`` (wheel or ``-e``) puts the ``.pth`` beside the package (setup.py's build_py)."""
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    found = [d for d in dirs if os.path.exists(os.path.join(d, PTH.name))]
    if not any(any(n.startswith(("mwb-", "__editable__.mwb")) and not n.endswith(".pth")
                   for n in os.listdir(d)) for d in dirs if os.path.isdir(d)):
        pytest.skip("mwb is not installed into this interpreter (run from a source tree)")
    assert found, f"{PTH.name} is in none of {dirs}: reinstall with pip install -e ."
    assert open(os.path.join(found[0], PTH.name)).read() == PTH.read_text()
