"""The wheel holds every tracked file under mwb/ (`python .ci/check_wheel.py dist/mwb-*.whl`, from the repo root).

Why beside tests/test_packaging.py: that test checks pyproject.toml's package-data globs against `git ls-files`
without building anything; this checks what setuptools actually put in the wheel, so a package folder that
`packages.find` misses, or a glob that does not mean what it seems to, fails CI too.
"""
import os
import subprocess
import sys
import zipfile


def main(wheel: str) -> int:
    listing = subprocess.run(["git", "ls-files", "mwb"], check=True, capture_output=True, text=True).stdout.split()
    tracked = {p for p in listing if os.path.exists(p)}  # the wheel is built from the work tree: a deleted file is gone
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("mwb/")}
    missing = sorted(tracked - shipped)
    if not tracked or missing:
        print(f"{wheel}: {len(missing)} tracked files under mwb/ are not in the wheel: {missing[:20]}", file=sys.stderr)
        return 1
    names = zipfile.ZipFile(wheel).namelist()
    pth = "mwb_lm_eval.pth"  # setup.py puts it at the wheel's top (site-packages): `lm_eval --model mwb`
    if pth not in names or zipfile.ZipFile(wheel).read(pth).decode() != open(pth).read():
        print(f"{wheel}: {pth} is missing from the top of the wheel or differs from the repository's", file=sys.stderr)
        return 1
    print(f"{wheel}: all {len(tracked)} tracked files under mwb/ are in the wheel, and {pth}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python .ci/check_wheel.py WHEEL")
    sys.exit(main(sys.argv[1]))
