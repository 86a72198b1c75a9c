"""Chat fine-tuning: conversations (OpenAI ``messages``, ShareGPT ``conversations``) rendered in the checkpoint's
chat format, the loss on every assistant turn. The registry imports this package; it imports its task module so
``chat`` registers."""
from . import task  # noqa: F401  (registers ``chat``)
