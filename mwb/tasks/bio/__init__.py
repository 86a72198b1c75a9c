"""Biomedical tasks as BioBERT and BioMegatron score them: ``ner`` (:mod:`.ner`, silver MEDLINE sample from
:mod:`.ner_silver`), ``chemprot`` (:mod:`.chemprot`) and ``bioasq`` (:mod:`.bioasq`), their metrics and the
template samples (:mod:`.samples`)."""
