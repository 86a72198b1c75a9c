"""Dialogue tasks: conversation data (chitchat, Wizard of Wikipedia), multi-actor and knowledge-grounded
fine-tuning. The registry imports this package; it imports its task modules so they register."""
from . import task  # noqa: F401  (registers ``dialogue``)
from . import msdp  # noqa: F401  (registers ``msdp``)
