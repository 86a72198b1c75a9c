"""Open-domain QA readers behind one interface (:class:`.base.Reader`): an extractive BERT span reader
(:mod:`.extractive`) and a T5 Fusion-in-Decoder reader (:mod:`.fid`); :mod:`.loading` builds and loads them."""
from .base import KINDS, NO_MATCH, Reader, ReaderConfig  # noqa: F401
