"""TextCraft: the environment (``env``), its expert planner (``expert``) and Agent-R's task
lists (``agent_r``). ``roleagent.envs.textcraft:TextCraftEnv`` is the registry's path."""

from roleagent.envs.textcraft.env import COMMANDS, DIFFICULTIES, TextCraftEnv

__all__ = ["COMMANDS", "DIFFICULTIES", "TextCraftEnv"]
