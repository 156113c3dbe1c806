"""The planner expert's episodes on one environment (checks that games are solvable).

SFT data comes from ``roleagent.sft.expert`` instead, which plays the expert through the
rollout code so its prompts are exactly the policy's.

The expert is ALFWorld's PDDL planner (fast-downward inside TextWorld): at every step
``AlfWorldEnv.expert_action()`` replans from the current state and returns the first
command (what ``EnvInfos(policy_commands=True)`` gives), so the expert also recovers
from states it did not cause.
"""

from __future__ import annotations

from roleagent.types import Step, Task, Trajectory


def run_expert_episode(env, task: Task, seed: int = 0) -> Trajectory:
    """Play ``task`` with the planner's commands until success or the step limit."""
    observation, _info = env.reset(task, seed)
    steps: list[Step] = []
    while True:
        action = env.expert_action()
        if action is None:
            break
        result = env.step(action)
        steps.append(
            Step(
                observation=observation,
                state_key=env.state_key(observation),
                action_text=action,
                action=action,
                valid=True,
                reward=result.reward,
                done=result.done,
                info=dict(result.info),
            )
        )
        observation = result.observation
        if result.done:
            break
    success = bool(steps and steps[-1].info.get("success"))
    return Trajectory(task=task, steps=steps, success=success, final_observation=observation, seed=seed)
