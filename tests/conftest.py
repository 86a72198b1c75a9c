import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MWB_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_mwb_cache"))
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
