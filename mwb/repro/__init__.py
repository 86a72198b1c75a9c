"""``mwb repro``: a paper's claim as one re-runnable command.

An experiment (:mod:`.api`) declares the paper, the claim, the conditions, the metrics, the paper's own
numbers and its scales; the registry (:mod:`.registry`) finds the experiments in ``mwb/repro/experiments/``;
the runner (:mod:`.runner`) runs every (condition, seed) cell through the same functions the ``mwb`` commands
use, resumably, and computes the comparisons and the verdict (:mod:`.analysis`); :mod:`.report` writes the
report, and :mod:`.index` the page of every committed reproduction (``docs/reproductions.md``).
"""
