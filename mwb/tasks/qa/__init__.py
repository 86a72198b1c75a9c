"""Open-domain question answering over the retrieval system: retrieval top-k accuracy (``qa``,
:mod:`.retrieval`) and a reader on retrieved passages (``qa-reader``, :mod:`.reader`)."""
