"""Agent-R (Yuan et al., 2025, arXiv 2501.11425): MCTS trees, revision trajectories, iterative SFT."""
