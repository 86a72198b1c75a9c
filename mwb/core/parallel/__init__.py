"""Process groups, differentiable collectives and tensor/sequence/data/pipeline/expert parallelism.

Names are imported lazily so that light commands (``mwb preprocess``, ``mwb plan``) and error types
(``LayoutError``, from :mod:`mwb.core.errors`, is re-exported by the torch-free ``dims`` module) do not pay for importing torch.
"""
from .dims import LayoutError, ParallelDims

__all__ = ["LayoutError", "ParallelDims", "ParallelState", "build_state", "single_process_state"]


def __getattr__(name):
    if name in ("ParallelState", "build_state", "single_process_state"):
        from . import state
        return getattr(state, name)
    raise AttributeError(name)
