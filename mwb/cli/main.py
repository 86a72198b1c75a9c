"""The ``mwb`` command: a click group whose subcommands live one per module and load lazily.

Loading lazily keeps ``mwb --help`` fast (no torch import) and lets each command own its module. Errors a
user can act on are printed as one line on stderr (exit 2 for usage, 1 at run time), also when a rank of a
``--nproc N`` job raised them (``mwb: error on rank R: ...``); ``--debug`` anywhere on the command line, or
``MWB_DEBUG=1``, shows the traceback too.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import click

# command name → "module:attribute"
COMMANDS = {
    "pretrain": "mwb.cli.pretrain:pretrain",
    "preprocess": "mwb.cli.preprocess:preprocess",
    "tokenizer": "mwb.cli.tokenizer:tokenizer",
    "plan": "mwb.cli.plan:plan",
    "eval": "mwb.cli.eval:eval_cmd",
    "finetune": "mwb.cli.finetune:finetune",
    "generate": "mwb.cli.generate:generate",
    "serve": "mwb.cli.serve:serve",
    "convert": "mwb.cli.convert:convert",
    "checkpoint": "mwb.cli.checkpoint:checkpoint",
    "models": "mwb.cli.models:models",
    "data": "mwb.cli.data:data",
    "chat": "mwb.cli.chat:chat",
    "detox": "mwb.cli.detox:detox",
    "score": "mwb.cli.score:score",
    "qa": "mwb.cli.qa:qa",
    "repro": "mwb.cli.repro:repro",
    "compare": "mwb.cli.compare:compare",
}


def _available() -> dict[str, str]:
    out = {}
    for name, target in COMMANDS.items():
        module = target.split(":")[0]
        if importlib.util.find_spec(module) is not None:
            out[name] = target
    return out


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(_available())

    def get_command(self, ctx, name):
        target = _available().get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mwb")
def cli():
    """Megatron Workbench: train transformer LMs the Megatron way (TP/SP/PP/DP/EP) from a laptop up.

    Errors are one line; add --debug anywhere (or set MWB_DEBUG=1) to see tracebacks."""


def main(argv=None) -> None:
    from mwb.core.errors import debug_enabled

    argv = list(sys.argv[1:] if argv is None else argv)
    saved = os.environ.get("MWB_DEBUG")
    if "--debug" in argv:
        os.environ["MWB_DEBUG"] = "1"  # ranks started by --nproc N read it too
    try:
        _run([a for a in argv if a != "--debug"], debug_enabled())
    finally:  # in-process callers (tests) get their environment back
        if saved is None:
            os.environ.pop("MWB_DEBUG", None)
        else:
            os.environ["MWB_DEBUG"] = saved


def _run(argv: list, debug: bool) -> None:
    from mwb.core.errors import USAGE_ERRORS, MwbError, RankError

    try:
        cli.main(args=argv, prog_name="mwb", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("mwb: aborted", err=True)
        sys.exit(1)
    except click.ClickException as e:
        if debug:
            raise
        e.show()
        sys.exit(e.exit_code)
    except RankError as e:
        if debug or e.kind == "internal":  # the failing rank's traceback, not the launcher's
            click.echo(e.traceback.rstrip(), err=True)
        click.echo(f"mwb: error on rank {e.rank}: {e.message}", err=True)
        sys.exit(2 if e.kind == "usage" else 1)
    except USAGE_ERRORS as e:
        if debug:
            raise
        click.echo(f"mwb: error: {e}", err=True)
        sys.exit(2)
    except (MwbError, FileNotFoundError) as e:
        if debug:
            raise
        click.echo(f"mwb: error: {e}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
