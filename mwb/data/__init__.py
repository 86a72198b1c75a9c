"""Data files shipped inside the package (see ``corpus/README.md`` for origin and licence)."""
import os

CORPUS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
