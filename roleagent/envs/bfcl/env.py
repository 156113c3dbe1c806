"""BFCL v3 multi-turn as a roleagent environment (the in-distribution benchmark of
SEAL, Hu et al., 2026).

    env = make_env("bfcl", interface="evolved")      # evolved applies to train tasks only
    task = env.tasks("eval")[0]                       # id "bfcl/eval/multi_turn_base_3"
    obs, info = env.reset(task, seed=0)               # info["instruction"]: tools + format
    result = env.step(model_turn_text)                # the model's WHOLE generated turn
    result.info["messages"]                           # chat history to append (tool/user)

**Action = the full model turn.** Unlike text games, the actor must pass the entire
generated text of the turn to ``step`` (one or more ``<tool_call>`` blocks, or plain
text). A turn with tool calls executes them and returns the tool results; a turn
without any decodable tool call ends the current user turn and returns the next user
message. ``info["messages"]`` (reset and step) carries the same text as bfcl's chat
messages, from which the rollout builds the policy's chat prompt.

Reward is bfcl's multi-turn verdict (1.0 / 0.0) at the end of the episode, 0 before.
``info["success"]`` is set when ``done``. See ``episode.py`` for the turn protocol and
checks, ``executor.py`` for the safety rules, ``diagnosis.py`` for the labels and
``interface.py`` for SEAL's train-only interface evolution.
"""

from __future__ import annotations

from typing import Any

from roleagent.envs.base import Environment, StepResult
from roleagent.envs.bfcl import data
from roleagent.envs.bfcl.diagnosis import PRIORITY_LABELS, diagnose_evidence
from roleagent.envs.bfcl.episode import Episode
from roleagent.envs.bfcl.interface import EvolvedInterface, FailureProfile, PlainInterface
from roleagent.envs.bfcl.parsing import CALL_FORMATS
from roleagent.envs.bfcl.schemas import chat_template_tools
from roleagent.types import Task, Trajectory

BASE_PROMPT = (
    "You are an expert in composing functions. You are given a question and a set of "
    "possible functions. Based on the question, you will need to make one or more "
    "function/tool calls to achieve the purpose.\n"
    "If none of the functions can be used, point it out. If the given question lacks the "
    "parameters required by the function, also point it out.\n\n"
    "At each turn, you should try your best to complete the tasks requested by the user "
    "within the current turn. Continue to output functions to call until you have "
    "fulfilled the user's request to the best of your ability. Once you have no more "
    "functions to call, reply in plain text without any function call: the system will "
    "consider the current turn complete and proceed to the next turn or task."
)

QWEN_TOOLS = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)

PYTHON_TOOLS = (
    "If you decide to invoke any of the function(s), you MUST put it in the format of "
    "[func_name1(params_name1=params_value1, params_name2=params_value2...), "
    "func_name2(params)]\nYou SHOULD NOT include any other text in a response that calls "
    "functions.\n\nHere is a list of functions in JSON format that you can invoke.\n{tools}"
)


def _checked_tool_prompt(tool_prompt: str, call_format: str) -> str:
    if tool_prompt not in ("text", "chat_template"):
        raise ValueError(f"tool_prompt must be 'text' or 'chat_template', got {tool_prompt!r}")
    if tool_prompt == "chat_template" and call_format != "qwen":
        raise ValueError("tool_prompt='chat_template' needs call_format='qwen' (templates ask for <tool_call> blocks)")
    return tool_prompt


class BFCLEnv(Environment):
    """BFCL v3 multi-turn (base, miss_func, miss_param, long_context), 400/400 split.

    Keyword arguments:
        call_format: ``"qwen"`` (``<tool_call>{json}</tool_call>``) or ``"python"``
            (``[f(a=1)]``, parsed with ``ast``).
        interface: ``"plain"`` or ``"evolved"`` (SEAL; applied to ``train`` tasks only,
            evaluation always sees the plain interface).
        max_steps_per_turn: tool-call steps per user turn; the one past it force-terminates
            the episode (bfcl's ``MAXIMUM_STEP_LIMIT``, 20).
        max_steps: optional cap on model steps per episode; 0 (default): none, as bfcl.
            ``BFCLEnv.max_steps`` (the rollout's loop bound) is this cap when set, else
            the most steps any episode can take: turns × (max_steps_per_turn + 1).
        max_action_chars: a longer action is rejected unparsed (nothing runs).
        max_calls_per_step: more calls in one turn are rejected (nothing runs).
        split_seed: seed of the fixed split (see ``data.py``); 0 is the project's split.
        split: ``"roleagent"`` (the hashed split above) or ``"authors"`` (the SEAL
            authors' released 400/400 split, ``data.authors_split``).
        categories: subset of the four categories.
        include_response_schema: also show the tools' ``response`` schemas (bfcl's
            prompting mode does; off by default to save tokens).
        schema_cues / recovery_hints / guidelines / affordance_cues: the parts of the
            evolved interface (``interface.py``); each can be switched off.
        activation: ``"profile"`` (default; Hu et al., 2026, §3.3): a training episode
            gets the switched-on components that the failure profile's selected failure
            types activate (``interface.ACTIVATES``), so iteration 0, with an empty
            profile, trains on the plain interface; ``"static"``: every switched-on
            component from the start (the authors' released setting).
        profile_window: trajectories kept by the failure profile.
        tool_format: ``"full"`` (bfcl's schemas, default) or ``"compact"`` (first sentence
            of each description, no backend preamble, minified JSON: roughly half the
            prompt tokens; ``interface.compact_doc``). Applies to train and eval alike.
        tool_prompt: how the tools reach the model. ``"text"`` (default, bfcl parity):
            the Qwen2.5 / Hermes tools block (``QWEN_TOOLS``, or ``PYTHON_TOOLS``) in the
            instruction, whatever the model. ``"chat_template"``: the instruction leaves
            the tools out and ``info["tools"]`` carries them (``schemas.chat_template_tools``);
            the rollout puts them on the system message and the engine renders them with
            the model's own template (``apply_chat_template(messages, tools=...)``). Needs
            ``call_format="qwen"`` (the model must answer in ``<tool_call>`` blocks, as
            Qwen2.5's and Hermes' templates ask); a template that ignores ``tools`` (e.g.
            SmolLM2's) is an error when the prompt is encoded (``engine.chat``).
        classes: keep only tasks whose ``involved_classes`` are all in this list
            (e.g. ``[TradingBot]``: single-backend tasks with short tool lists).
        train_per_category / eval_per_category: keep the first k tasks of each category
            of that split (after ``classes``; split order, see ``data.split_ids``);
            0 keeps all. Small fixed subsets for CPU runs.
        type_check: reject calls whose argument values break the schema types. Off by
            default: bfcl executes such calls (Python is dynamic), and the reward is its
            verdict. With the check on, 4 train entries (``multi_turn_*_173``: the ground
            truth passes ``ticket_id='ticket_001'`` to an integer parameter) cannot be
            solved; the eval split is unaffected.
    """

    name = "bfcl"
    max_steps = 20
    failure_taxonomy = PRIORITY_LABELS
    #: ``diagnose`` returns per-turn ``turn_labels`` (SEAL's utilities) and the
    #: failure profile behind the evolved interface can be pushed to workers.
    diagnosis_turn_labels = True
    remote_methods = ("update_profile", "set_profile", "profile_state")

    def __init__(
        self,
        call_format: str = "qwen",
        interface: str = "plain",
        max_steps: int = 0,
        max_steps_per_turn: int = 20,
        max_action_chars: int = 16384,
        max_calls_per_step: int = 64,
        split_seed: int = data.DEFAULT_SPLIT_SEED,
        categories: tuple[str, ...] | list[str] = data.CATEGORIES,
        include_response_schema: bool = False,
        schema_cues: bool = True,
        recovery_hints: bool = True,
        guidelines: bool = True,
        affordance_cues: bool = True,
        activation: str = "profile",
        profile_window: int = 512,
        type_check: bool = False,
        tool_format: str = "full",
        classes: tuple[str, ...] | list[str] | None = None,
        train_per_category: int = 0,
        eval_per_category: int = 0,
        split: str = "roleagent",
        tool_prompt: str = "text",
    ) -> None:
        if call_format not in CALL_FORMATS:
            raise ValueError(f"call_format must be one of {CALL_FORMATS}, got {call_format!r}")
        self.tool_prompt = _checked_tool_prompt(tool_prompt, call_format)
        if interface not in ("plain", "evolved"):
            raise ValueError(f"interface must be 'plain' or 'evolved', got {interface!r}")
        unknown = [c for c in categories if c not in data.CATEGORIES]
        if unknown:
            raise ValueError(f"unknown categories {unknown}; known: {data.CATEGORIES}")
        if split not in data.SPLIT_SOURCES:
            raise ValueError(f"split must be one of {data.SPLIT_SOURCES}, got {split!r}")
        if tool_format not in ("full", "compact"):
            raise ValueError(f"tool_format must be 'full' or 'compact', got {tool_format!r}")
        unknown_classes = [c for c in (classes or ()) if c not in data.BACKENDS]
        if unknown_classes:
            raise ValueError(f"unknown classes {unknown_classes}; known: {tuple(data.BACKENDS)}")
        self.tool_format = tool_format
        self.classes = tuple(classes) if classes else None
        self.per_category = {"train": int(train_per_category), "eval": int(eval_per_category)}
        self.call_format = call_format
        self.interface_mode = interface
        if int(max_steps) < 0 or int(max_steps_per_turn) < 1:
            raise ValueError(
                f"max_steps must be >= 0 and max_steps_per_turn >= 1, got {max_steps} and {max_steps_per_turn}"
            )
        self.max_steps_cap = int(max_steps)
        self.max_steps_per_turn = int(max_steps_per_turn)
        self.max_action_chars = int(max_action_chars)
        self.max_calls_per_step = int(max_calls_per_step)
        self.split_seed = int(split_seed)
        self.split_source = split
        self.categories = tuple(categories)
        self.include_response_schema = include_response_schema
        self.type_check = bool(type_check)
        self.profile = FailureProfile(profile_window)
        self._plain = PlainInterface()
        self._evolved = EvolvedInterface(
            self.profile,
            schema_cues=schema_cues,
            recovery_hints=recovery_hints,
            guidelines=guidelines,
            affordance_cues=affordance_cues,
            activation=activation,
        )
        self._plain.compact = self._evolved.compact = tool_format == "compact"
        longest = max((n for c in self.categories for n in data.entry_question_turns(c)), default=1)
        self.max_steps = self.max_steps_cap or longest * (self.max_steps_per_turn + 1)
        self._episode: Episode | None = None
        self._task: Task | None = None
        self._interface: PlainInterface = self._plain

    # ----------------------------------------------------------------- tasks ---------

    def tasks(self, split: str) -> list[Task]:
        out = []
        limit = self.per_category.get(split, 0)
        taken: dict[str, int] = {}
        for entry_id in data.split_ids(split, self.split_seed, self.categories, self.split_source):
            e = data.entry(entry_id)
            if self.classes is not None and not set(e["involved_classes"]) <= set(self.classes):
                continue
            if limit and taken.get(e["category"], 0) >= limit:
                continue
            taken[e["category"]] = taken.get(e["category"], 0) + 1
            out.append(
                Task(
                    id=data.task_id(split, entry_id),
                    env=self.name,
                    payload={"entry_id": entry_id},
                    split=split,
                    metadata={
                        "category": e["category"],
                        "task_type": e["category"],  # per-category eval tables
                        "n_turns": len(e["question"]),
                        "involved_classes": list(e["involved_classes"]),
                    },
                )
            )
        return out

    # ------------------------------------------------------------------ episode -------

    def _interface_for(self, task: Task) -> PlainInterface:
        return self._evolved if (self.interface_mode == "evolved" and task.split == "train") else self._plain

    def _new_episode(self, task: Task, interface: PlainInterface) -> Episode:
        entry_id = task.payload.get("entry_id") or data.entry_id_of_task(task.id)
        return Episode(
            data.entry(entry_id),
            call_format=self.call_format,
            max_steps=self.max_steps_cap,
            max_steps_per_turn=self.max_steps_per_turn,
            max_action_chars=self.max_action_chars,
            max_calls_per_step=self.max_calls_per_step,
            render_tools=lambda docs: interface.render_tools(self._docs(docs)),
            hint=interface.hint if interface is not self._plain else None,
            type_check=self.type_check,
        )

    def _docs(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.include_response_schema:
            return docs
        return [{k: v for k, v in d.items() if k != "response"} for d in docs]

    def reset(self, task: Task, seed: int = 0) -> tuple[str, dict[str, Any]]:
        """Start an episode (bfcl is deterministic: ``seed`` changes nothing)."""
        self._task = task
        self._interface = self._interface_for(task)
        self._interface.begin_episode()
        self._episode = self._new_episode(task, self._interface)
        ep = self._episode
        tools = ep.render_tools(ep.tool_docs(ep.available))
        template = QWEN_TOOLS if self.call_format == "qwen" else PYTHON_TOOLS
        instruction = BASE_PROMPT
        if self.tool_prompt == "text":
            instruction += "\n\n" + template.format(tools=tools)
        for note in self._interface.notes([d["name"] for d in ep.tool_docs(ep.available)]):
            instruction += "\n\n" + note
        guidelines = self._interface.guidelines()
        if guidelines:
            instruction += "\n\n# Guidelines\n" + "\n".join(f"- {g}" for g in guidelines)
        first = ep.first_observation()
        info = {
            "instruction": instruction,
            "interface": self._interface.name,
            "category": ep.category,
            "n_turns": len(ep.turns),
            "turn": 0,
            "guidelines": guidelines,
            "cues": sorted(self._interface.active),
            "messages": [{"role": "user", "content": first}],
        }
        if self.tool_prompt == "chat_template":
            info["tools"] = chat_template_tools(tools)
        return first, info

    def step(self, action: str) -> StepResult:
        if self._episode is None:
            raise RuntimeError("call reset() before step()")
        obs, reward, done, info = self._episode.step(action)
        if done:
            info["diagnosis"] = diagnose_evidence(self._episode.turns, self._episode.success)
        return StepResult(obs, reward, done, info)

    def expert_action(self) -> str | None:
        if self._episode is None or self._episode.done:
            return None
        return self._episode.expert_action()

    @property
    def episode(self) -> Episode | None:
        return self._episode

    # ---------------------------------------------------------------- diagnosis -------

    def diagnose(self, trajectory: Trajectory) -> dict[str, Any]:
        """Replay the trajectory's turns on fresh backends and label every ground-truth
        turn (``diagnosis.py``): ``{"turn_labels", "priority_labels", "dominant_type",
        "official", "success"}``. Uses ``step.action`` when it is a string, else
        ``step.action_text`` (for this env both are the full model turn); steps marked
        ``valid=False`` are skipped, as the rollout never stepped the env with them."""
        ep = self._new_episode(trajectory.task, self._plain)
        for step in trajectory.steps:
            if ep.done:
                break
            if getattr(step, "valid", True) is False:
                continue  # the rollout never sent an unparsable (e.g. empty) turn to the env
            text = step.action if isinstance(step.action, str) else step.action_text
            ep.step(text)
        return diagnose_evidence(ep.turns, ep.success if ep.done else False)

    def update_profile(self, diagnosis: dict[str, Any], reward: float) -> None:
        """Feed one training trajectory's diagnosis to the failure profile."""
        self.profile.update_from_diagnosis(diagnosis, reward)

    def set_profile(self, state: dict[str, Any]) -> int:
        """Replace the failure profile with ``FailureProfile.state_dict()`` output (the
        trainer's SEAL hook pushes its authoritative profile to every worker with
        ``EnvPool.call_all("set_profile", state)``); returns the profile's size."""
        self.profile.load_state_dict(state)
        return len(self.profile)

    def profile_state(self) -> dict[str, Any]:
        return self.profile.state_dict()

    def state_dict(self) -> dict[str, Any]:
        return {"profile": self.profile.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.profile.load_state_dict(state["profile"])

    def close(self) -> None:
        self._episode = None
