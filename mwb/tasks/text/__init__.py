"""Generative text tasks on record files: ``prompt-target`` (:mod:`.prompt_target`) and ``summarize``
(:mod:`.summarize`)."""
