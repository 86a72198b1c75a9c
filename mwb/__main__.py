"""``python -m mwb`` (what ``torchrun ... -m mwb pretrain gpt`` runs)."""
from mwb.cli.main import main

main()
