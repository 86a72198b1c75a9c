"""Registers ``mwb eval qa`` (open-domain QA retrieval, DPR vs BM25); the task lives in
:mod:`mwb.retrieval.qa_task`. The registry imports every module of ``mwb.tasks``, so this import is the hook."""
from mwb.retrieval.qa_task import QATask  # noqa: F401
