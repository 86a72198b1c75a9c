"""The task framework: the :class:`~.base.Task` interface, the registry, the encoder and generative objectives,
a task's declared fine-tuning table (:mod:`.finetuning_spec`), the one setup path of every fine-tuning command
(:mod:`.setup`), the fine-tuning runner (:mod:`.finetune`), the evaluation entry point (:mod:`.evaluate`) and the
shared data formats (:mod:`.formats`). It names no task: tasks live in the family packages beside it
(``mwb.tasks.race``, ``mwb.tasks.bio``, …), which the registry discovers."""
