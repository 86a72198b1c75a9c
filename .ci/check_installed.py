"""An installed (non-editable) mwb reads its bundled defaults: run with the wheel's virtual environment, from a
directory outside the repository, so `import mwb` can only find the installed package.

`mwb finetune ner` and `chemprot` with no --data read the sample folders under mwb/tasks/bio/bundled/; a wheel
without them fails only after a non-editable install, which the test suite (run from the source tree) never does.
The expected sizes are the samples' documented ones (mwb/tasks/bio/README.md).
"""
import os
import sys

import mwb
from mwb.tasks.api.registry import get_task

EXPECTED = {"ner": {"train": 863, "devel": 193, "test": 174}, "chemprot": {"train": 120, "dev": 48, "test": 48}}


def main(repo: str) -> int:
    installed = os.path.dirname(os.path.abspath(mwb.__file__))
    if installed.startswith(os.path.abspath(repo) + os.sep):
        print(f"mwb was imported from the source tree ({installed}), not from the installed wheel", file=sys.stderr)
        return 1
    for name, splits in EXPECTED.items():
        task = get_task(name)()
        if not task.default_data.startswith(installed + os.sep):
            print(f"{name}: default data {task.default_data} is outside the installed package", file=sys.stderr)
            return 1
        got = {split: len(task.read(task.default_data, split)) for split in splits}
        if got != splits:
            print(f"{name}: bundled sample has {got} examples, expected {splits}", file=sys.stderr)
            return 1
        print(f"{name}: bundled sample read from the installed package: {got}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python check_installed.py REPO_ROOT (run outside REPO_ROOT)")
    sys.exit(main(sys.argv[1]))
