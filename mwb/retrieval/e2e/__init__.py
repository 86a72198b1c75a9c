"""End-to-end retriever + reader training for open-domain QA (Sachan et al. ACL 2021; EMDR2, NeurIPS 2021).

Modules, one job each:

``scoring``  which similarity the joint losses train: the starting retriever's own (its normalisation,
             temperature / √h scaling, query and context lengths), kept in the saved retriever
``losses``   the joint objectives as pure functions: EMDR2's retriever term and the individual top-k
             marginal likelihood, and the retriever score q·d / divisor
``refresh``  a versioned faiss index over the evidence, refreshed every N steps, synchronously on the
             training ranks or asynchronously on separate indexer ranks (``--indexer-ranks R``)
``joint``    the trainer's view of a retriever + reader pair: retrieve from the current index, score the
             top-k with the live encoders, add the reader's loss (``pipeline``: the retriever stays fixed)
``evaluate`` held-out retriever top-k and reader EM (also with random passages), before and after
``train``    the ``mwb finetune e2e-qa`` flow on the shared training job skeleton
"""
