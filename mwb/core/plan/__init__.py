"""``mwb plan``: parameters, FLOPs, memory and communication of a model on a cluster, and the parallel
layouts that fit, ranked by a simple documented cost model (see ``docs/plan.md``).

Pure arithmetic on the config: nothing here builds a model or touches a GPU.
"""
from .cost import Comm, CostModel, Estimate
from .formulas import (activation_breakdown, activation_bytes_per_layer, bytes_per_parameter,
                       inflight_microbatch_chunks, korthikanti_bytes_per_layer, model_flops_per_iteration,
                       paper_flops_per_iteration, paper_parameter_count, pipeline_bubble)
from .layout import HARDWARE, Constraints, Hardware, Layout, Workload
from .memory import Memory, MemoryModel
from .model import ModelShape, ParamCount, count_parameters, flops_per_iteration, rank_parameters
from .search import PlanResult, plan, search

__all__ = [
    "Comm", "Constraints", "CostModel", "Estimate", "HARDWARE", "Hardware", "Layout", "Memory", "MemoryModel",
    "ModelShape", "ParamCount", "PlanResult", "Workload", "activation_breakdown", "activation_bytes_per_layer",
    "bytes_per_parameter", "count_parameters", "flops_per_iteration", "inflight_microbatch_chunks",
    "korthikanti_bytes_per_layer", "model_flops_per_iteration", "paper_flops_per_iteration",
    "paper_parameter_count", "pipeline_bubble", "plan", "rank_parameters", "search",
]
