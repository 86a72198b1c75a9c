"""Few-shot instruction prompts for social-bias detection (Prabhumoye et al. 2021): ``bias`` and ``bias-sweep``."""
from . import sweep, task  # noqa: F401  (registers the tasks)
