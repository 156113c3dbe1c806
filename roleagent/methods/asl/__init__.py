"""Agentic Self-Learning (Sun et al., 2025, arXiv 2510.14253): prompt generator, generative reward model and policy in one backbone."""
