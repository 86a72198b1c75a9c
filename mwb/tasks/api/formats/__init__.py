"""Data formats more than one task family reads, one reader each: SQuAD JSON (:mod:`.squad_json`), a split's
file in a data directory (:mod:`.splits`) and prompt/target records (:mod:`.prompt_target`)."""
