"""roleagent: train LLM agents by agent-environment co-evolution, one LLM in several roles."""

__version__ = "0.1.0"
