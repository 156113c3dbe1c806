"""Role-Agent (Wang et al., 2026, arXiv 2606.10917): World-In-Agent (``wia``: predictor
role, rollout extension, prediction scores, the ``role_agent`` advantage estimator) and
Agent-In-World (``aiw/``: failure analysis → memory → retrieval → task distribution).
Config sections: ``config.py``."""
