"""Batch-size ramp-up (Megatron's --rampup-batch-size START INCREMENT SAMPLES): the schedule is Megatron's,
the trainer takes exactly those batches, DP2 equals one process, and a run resumed mid-ramp equals an
uninterrupted one."""
import copy

import pytest

from mwb.core import checkpoint
from mwb.core.config import ConfigError
from mwb.core.parallel.dims import LayoutError
from mwb.core.training.rampup import BatchRampup
from tests.helpers.compare import assert_losses_match
from tests.helpers.distributed import run_ranks
from tests.helpers.workers import make_trainer, train_and_report


def megatron_schedule(start, increment, samples, global_batch, steps):
    """Megatron-LM's RampupBatchsizeNumMicroBatchesCalculator, step by step: before each step the batch is
    ``start + int(consumed / (samples / ((global - start) / increment))) * increment`` while consumed ≤ samples,
    else the global batch; then consumed grows by that batch."""
    per_increment = samples / ((global_batch - start) // increment)
    consumed, out = 0, []
    for _ in range(steps):
        size = global_batch if consumed > samples else start + int(consumed / per_increment) * increment
        out.append(size)
        consumed += size
    return out


CASES = [(2, 2, 25, 8), (4, 4, 100, 16), (8, 8, 64, 64), (16, 16, 1000, 48), (3, 5, 77, 53), (32, 32, 12000, 1920)]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_schedule_is_megatrons(case):
    start, inc, samples, gbs = case
    ramp = BatchRampup.from_config(list(case[:3]), gbs)
    steps = 400
    want = megatron_schedule(start, inc, samples, gbs, steps)
    consumed, got = 0, []
    for _ in range(steps):
        got.append(ramp.batch_size(consumed))
        consumed += got[-1]
    assert got == want
    assert want[0] == start and want[-1] == gbs and len(set(want)) > 2
    # the jumped phases walk the same schedule (what `mwb plan` sums over)
    phases = ramp.phases(steps=steps)
    assert [b for b, n in phases for _ in range(n)] == want
    assert ramp.consumed_after(steps) == sum(want)
    total = sum(want[:123]) - 1
    flat = [b for b, n in ramp.phases(total_samples=total) for _ in range(n)]
    assert flat == want[:123]


BASE = {
    "model": {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "dropout": 0.0,
              "max_position_embeddings": 64},
    "train": {"steps": 7, "micro_batch_size": 2, "global_batch_size": 12, "seq_length": 16, "seed": 3,
              "rampup_batch_size": [4, 4, 20]},
    "optim": {"lr": 1e-3, "warmup_steps": 1, "decay_steps": 7},
}


def tree(**train):
    t = copy.deepcopy(BASE)
    t["train"].update(train)
    return t


def test_trainer_takes_the_schedules_batches():
    trainer = make_trainer(tree(), 1)
    history = trainer.run()
    want = megatron_schedule(4, 4, 20, 12, 7)
    assert [h.extra["global_batch_size"] for h in history] == want == [4, 4, 4, 8, 12, 12, 12]
    assert [h.tokens for h in history] == [b * 16 for b in want]  # the samples of each step really ran
    assert trainer.consumed_samples == sum(want)


@pytest.mark.multiprocess
def test_dp2_matches_single_process():
    ref = train_and_report(0, 1, tree())
    got = run_ranks(train_and_report, 2, tree())
    assert_losses_match("rampup dp2", got[0]["losses"], ref["losses"], steps=7)


def test_resume_mid_ramp_equals_uninterrupted(tmp_path):
    ref = [h.loss for h in make_trainer(tree(), 1).run()]
    first = make_trainer(tree(steps=4), 1)
    head = [h.loss for h in first.run()]
    path = checkpoint.save(first, str(tmp_path / "ck"))
    second = make_trainer(tree(), 1)
    assert checkpoint.load(second, path) == 4 and second.consumed_samples == 4 + 4 + 4 + 8
    tail = [h.loss for h in second.run()]
    assert head + tail == ref


@pytest.mark.parametrize("train,needle", [
    ({"rampup_batch_size": [12, 4, 20]}, "smaller than the global batch"),
    ({"rampup_batch_size": [4, 5, 20]}, "not a multiple of INCREMENT"),
    ({"rampup_batch_size": [4, 4, 0]}, "must be positive"),
    ({"rampup_batch_size": [3, 3, 20], "global_batch_size": 12}, "multiples of micro-batch size"),
])
def test_bad_rampup_is_one_clear_error(train, needle):
    with pytest.raises((ConfigError, LayoutError), match=needle):
        make_trainer(tree(**train), 1)
