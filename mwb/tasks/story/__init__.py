"""MEGATRON-CNTRL (Xu et al., EMNLP 2020): controllable story generation with external knowledge.

Tasks registered here: ``story-keywords`` (keyword predictor, :mod:`.keyword_predictor`), ``story-generator``
(conditional generator, :mod:`.generator`) and ``story`` (``mwb eval story``: the whole system, :mod:`.task`);
``mwb finetune story`` trains all parts (:mod:`.train`) and ``mwb generate story`` writes with them
(:mod:`.writer`). See docs/story.md.
"""
from . import generator, keyword_predictor, task  # noqa: F401  (registers the tasks)
