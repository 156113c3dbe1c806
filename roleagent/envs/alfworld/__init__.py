"""ALFWorld on the real TextWorld PDDL engine, offline (see docs/alfworld.md).

* ``env.AlfWorldEnv`` - the environment (registered as "alfworld").
* ``generator`` / ``scenes`` / ``pddl`` - deterministic ALFRED-style game generation.
* ``engine`` - alfworld's wrappers around TextWorld's PDDL backend; planner check.
* ``official`` - loading ALFWorld's released games from ``$ALFWORLD_DATA``.
* ``expert`` - planner expert episodes (SFT data: ``roleagent.sft``).
* ``diagnosis`` - rule-based failure labels (Role-Agent Table 6), built on ``commands``
  (command / feedback text), ``groundtruth`` (the game's goal and layout) and ``replay``.
* ``report`` - the paper's Table 1 format.

Importing this package does not import alfworld or textworld; ``diagnosis`` and
``report`` work without them.
"""

from roleagent.envs.alfworld.diagnosis import FAILURE_TAXONOMY
from roleagent.envs.alfworld.report import alfworld_table
from roleagent.envs.alfworld.scenes import TABLE_COLUMNS, TASK_TYPES

__all__ = ["FAILURE_TAXONOMY", "TABLE_COLUMNS", "TASK_TYPES", "alfworld_table"]
