"""mwb.tasks: the task framework (:mod:`mwb.tasks.api`) and one package per task family (``race``, ``glue``,
``squad``, ``bio``, ``bbc``, ``text``, ``chat``, ``lm``, ``qa``, ``dialogue``, ``story``, ``detox``, ``bias``,
``synthetic_qa``), which the registry discovers. See README.md here."""
