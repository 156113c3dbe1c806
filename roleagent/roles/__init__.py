"""Roles the one LLM plays: actor (acts), predictor (World-In-Agent). Analyst and retriever
roles of Agent-In-World live in ``roleagent.aiw``."""
