"""``torchrun --nproc-per-node 2 -m lm_eval --model mwb``: a tiny GPT split over two tensor-parallel ranks (gloo)
gives the one-process samples (log-likelihoods within 1e-5, the same generations); rank 0 alone writes the
results, the other rank follows it and exits with it."""
import os
import socket
import sys

import pytest

from tests.helpers.checkpoints import tiny_checkpoint
from tests.helpers.needs import needs

from .test_lm_eval_backend import lm_eval_cli, per_sample, run, write_tasks

pytestmark = [needs("lm_eval"), pytest.mark.multiprocess]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tp2_equals_one_process(tmp_path):
    ckpt = tiny_checkpoint(str(tmp_path / "ckpt"), "gpt-tiny", num_attention_heads=4)
    d = str(tmp_path / "tasks")
    os.makedirs(d)
    names = write_tasks(d)
    argv = ["--model", "mwb", "--model_args", f"checkpoint={ckpt},batch_size=4", "--tasks", ",".join(names)]
    from lm_eval.api.registry import get_model
    from lm_eval.tasks import TaskManager
    # One process in-process (the same backend, batch 4), two TP ranks through torchrun + the bare lm_eval CLI.
    in_process = run(get_model("mwb")(checkpoint=ckpt, batch_size=4), (names, TaskManager(include_path=d)))
    one = {t: per_sample(in_process, t) for t in names}
    r1 = in_process["results"]
    launcher = ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                "--master-port", str(free_port())]
    two, r2 = lm_eval_cli(argv, d, str(tmp_path / "two"), launcher=launcher)
    assert sorted(one) == sorted(two) == ["mwbt_gen", "mwbt_mc", "mwbt_rolling"]
    for task in one:
        for doc, s in one[task].items():
            for x, y in zip(s["resps"], two[task][doc]["resps"]):
                x, y = x[0], y[0]
                if isinstance(x, str):
                    assert x == y
                elif isinstance(x, (list, tuple)):
                    assert float(x[0]) == pytest.approx(float(y[0]), abs=1e-5) and str(x[1]) == str(y[1])
                else:
                    assert float(x) == pytest.approx(float(y), abs=1e-5)
    assert r1["mwbt_mc"]["acc,none"] == r2["mwbt_mc"]["acc,none"]
