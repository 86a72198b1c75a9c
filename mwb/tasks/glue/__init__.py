"""GLUE (Wang et al. 2018): the ``glue`` task (:mod:`.task`), GLUE's TSV layouts and submission format
(:mod:`.data`) and its metrics (:mod:`.metrics`)."""
