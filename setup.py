"""Everything about the package is in pyproject.toml; this file only adds ``mwb_lm_eval.pth`` to what is
installed, beside the ``mwb`` package (site-packages' top level, where Python's ``site`` runs ``.pth`` lines),
for both wheels and editable installs. Its one line imports :mod:`mwb.lm_eval_plugin`, which registers
``lm_eval --model mwb`` lazily in lm-eval releases that do not read the ``lm_eval.models`` entry point."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "mwb_lm_eval.pth"


class BuildPyWithPth(build_py):
    """build_py, plus the ``.pth`` file at the top of ``build_lib`` (also in editable mode)."""

    def run(self):
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, PTH), preserve_mode=False)
        if getattr(self, "editable_mode", False):
            # An editable wheel holds only its own path hook plus what lies in its unpacked root, which
            # setuptools' editable_wheel names as the install directory: the .pth goes there.
            root = self.get_finalized_command("install").install_lib
            self.copy_file(PTH, os.path.join(root, PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]

    def get_output_mapping(self):
        return {**super().get_output_mapping(), os.path.join(self.build_lib, PTH): PTH}


setup(cmdclass={"build_py": BuildPyWithPth})
