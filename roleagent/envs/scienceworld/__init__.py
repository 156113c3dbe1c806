"""ScienceWorld on the real simulator (``scienceworld==1.2.3``): see ``env.py``."""

from roleagent.envs.scienceworld.env import ScienceWorldEnv

__all__ = ["ScienceWorldEnv"]
