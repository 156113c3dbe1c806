"""The actor role every method shares. Method-specific roles live with their method:
the World-In-Agent predictor in ``roleagent.methods.role_agent.wia``, the Agent-In-World
analyst and retriever in ``roleagent.methods.role_agent.aiw``."""
