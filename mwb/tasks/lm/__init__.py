"""Zero-shot language-model tasks (Megatron's ``tasks/zeroshot_gpt``): ``lambada`` (:mod:`.lambada`) and
``wikitext`` (:mod:`.wikitext`), on the base in :mod:`.common`."""
