"""SGEAT (Wang et al., NeurIPS 2022): detoxification by domain-adaptive training on self-generated data.

Steps: self-generation and filtering (:mod:`.selfgen`), domain-adaptive training (:mod:`.dapt`),
RealToxicityPrompts evaluation (the ``toxicity`` task, :mod:`.toxicity`), and the whole loop (:mod:`.loop`).
"""
from . import heldout, toxicity  # noqa: F401  (registers the tasks)
