"""SQuAD 1.1 / 2.0 extractive question answering: the ``squad`` task (:mod:`.task`) and its examples,
doc-stride windows and n-best span decoding (:mod:`.data`)."""
