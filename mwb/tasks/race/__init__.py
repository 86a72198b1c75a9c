"""RACE reading comprehension (Lai et al. 2017): the ``race`` task (:mod:`.task`) and the template-made sample
it defaults to (:mod:`.sample`, ``bundled/race_sample``)."""
