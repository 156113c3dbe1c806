"""Supervised warm start: chat examples (``data``), expert demonstrations played through
the rollout code (``expert``), the SFT trainer (``train``) and the recipe stage that runs
them before RL (``warm_start``)."""

from roleagent.sft.data import ChatExample, EncodedExample, SFTDataError, encode_example
from roleagent.sft.sources import read_examples

__all__ = ["ChatExample", "EncodedExample", "SFTDataError", "encode_example", "read_examples"]
