"""Run ``mwb`` in-process as the console script does, capturing exit code and output."""
from mwb.cli.main import main


def run_cli(argv, capsys):
    code = 0
    try:
        main(argv)
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err
