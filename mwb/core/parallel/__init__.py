"""Process groups, differentiable collectives and tensor/sequence/data/pipeline/expert parallelism."""
from .dims import LayoutError, ParallelDims
from .state import ParallelState, build_state, single_process_state

__all__ = ["LayoutError", "ParallelDims", "ParallelState", "build_state", "single_process_state"]
