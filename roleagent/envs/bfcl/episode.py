"""One BFCL multi-turn episode: the model's backends, the ground-truth replay, and the
official per-turn checks.

Turn protocol (bfcl's ``inference_multi_turn_FC`` loop, one env step per model step):

- the model's output is one *step*; if it contains tool calls they are executed and the
  tool results are the next observation, the user turn goes on;
- a step that decodes to no call ends the user turn: plain text, or a step bfcl's decoder
  rejects as a whole (any ``<tool_call>`` block that is not a JSON object with a string
  ``name`` and object ``arguments``, or an unparsable python call list); nothing of such a
  step is executed, as in bfcl (``decode_execute`` fails, the handler breaks out of the
  turn). The turn is checked and the next user message (or, for miss_func, the newly
  revealed tool schemas followed by bfcl's "I have updated some more functions you can
  choose from. What about now?") is the next observation;
- the model has ``max_steps_per_turn`` tool-call steps per user turn (bfcl's
  ``MAXIMUM_STEP_LIMIT`` = 20): the step that exceeds it is executed and then
  force-terminates the episode (bfcl: ``count > MAXIMUM_STEP_LIMIT`` → force quit,
  failed). There is no cap per episode unless ``max_steps`` > 0 is given (not bfcl's).
- every tool of the entry's backend classes can be called, including miss_func tools
  before their turn reveals them: bfcl executes any method of the involved instances, so
  an early call to a held-out tool changes the state exactly as it does there.

Each step also reports ``info["messages"]``: what the step adds to bfcl's chat history
after the model's own message (one ``tool`` message per executed call, or the next
``user`` message when the turn ended); ``reset`` reports the first user message. The
rollout builds the policy's prompt from them (``roleagent.rollout.actor.chat_messages``).

Checks. At the end of every user turn the ground-truth calls of that turn are executed on
a second set of fresh backends and compared with the model's backends using bfcl's own
``state_checker`` and ``response_checker`` (imported from bfcl_eval; they do not eval).
The verdict follows ``multi_turn_checker`` exactly: for a non-empty ground-truth turn the
model must have decoded at least one call (else ``empty_turn_model_response``), then the
states must match, then every ground-truth result string must appear among all of the
model's results so far; an empty ground-truth turn is not checked. The episode succeeds
when every turn passes; the first failing turn is the official error. Unlike bfcl we keep
checking the later turns (without changing the verdict): that is the per-turn evidence
the diagnosis uses.

Remaining differences from bfcl's decoder: blocks need not have bfcl's exact newlines
(``<tool_call>\\n…\\n</tool_call>``), duplicate keys and NaN/Infinity are decode failures
(``parsing.strict_json_loads``), and an over-long step (``max_action_chars``) or one
with more than ``max_calls_per_step`` calls is a decode failure (bfcl has no such limit).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from roleagent.envs.bfcl.executor import PARSE_ERROR, Backends, CallRecord, tool_schemas
from roleagent.envs.bfcl.parsing import ParsedCall, parse_call_string, parse_turn, render_calls

ADDITIONAL_FUNCTION_PROMPT = "I have updated some more functions you can choose from. What about now?"


@dataclass
class TurnEvidence:
    """Executable evidence for one ground-truth user turn."""

    turn: int
    gt_calls: list[str]
    gt_parsed: list[dict[str, Any]] = field(default_factory=list)  # [{"name", "arguments"}]
    reached: bool = False
    steps: list[list[dict[str, Any]]] = field(default_factory=list)  # model steps → call records
    checked: bool = False
    state_equal_before: bool = True
    state_equal: bool | None = None
    state_diff: dict[str, list[str]] = field(default_factory=dict)
    response_ok: bool | None = None
    missing_responses: list[str] = field(default_factory=list)
    gt_results: list[str] = field(default_factory=list)
    official: str = "unchecked"  # pass | empty_turn_model_response | instance_state_mismatch |
    #                              execution_response_mismatch | skipped (empty GT) | unchecked
    checker_error: str | None = None
    gt_error: str | None = None

    @property
    def gt_empty(self) -> bool:
        return not self.gt_calls

    def calls(self) -> list[dict[str, Any]]:
        return [c for step in self.steps for c in step]

    def decoded_calls(self) -> list[dict[str, Any]]:
        return [c for c in self.calls() if c["status"] != "parse_error"]

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


class Episode:
    def __init__(
        self,
        entry: dict[str, Any],
        *,
        call_format: str = "qwen",
        max_steps: int = 0,
        max_steps_per_turn: int = 20,
        max_action_chars: int = 16384,
        max_calls_per_step: int = 64,
        render_tools: Callable[[list[dict[str, Any]]], str] | None = None,
        hint: Callable[[CallRecord, dict[str, Any]], str | None] | None = None,
        type_check: bool = False,
    ) -> None:
        self.entry = entry
        self.call_format = call_format
        self.max_steps = max_steps
        self.max_steps_per_turn = max_steps_per_turn
        self.max_action_chars = max_action_chars
        self.max_calls_per_step = max_calls_per_step
        self.render_tools = render_tools or (lambda docs: "\n".join(json.dumps(d) for d in docs))
        self.hint = hint
        self.type_check = type_check
        self.category = entry["category"]
        self.long_context = "long_context" in self.category or "composite" in self.category
        classes = list(entry["involved_classes"])
        self.model = Backends(classes, entry["initial_config"], self.long_context)
        self.truth = Backends(classes, entry["initial_config"], self.long_context)
        self.schemas = tool_schemas(classes)
        self.missed: dict[int, list[str]] = {int(k): list(v) for k, v in (entry.get("missed_function") or {}).items()}
        held = {n for names in self.missed.values() for n in names}
        self.available: set[str] = {n for n in self.schemas if n not in held}
        self.turns = [TurnEvidence(i, list(gt)) for i, gt in enumerate(entry["ground_truth"])]
        for ev in self.turns:
            for call in ev.gt_calls:
                try:
                    p = parse_call_string(call)
                    # the ground truth is trusted: no value-type check (4 train entries,
                    # the *_173 family, pass a str ticket id where the schema says integer)
                    kwargs, err, _ = self.truth.check(p, frozenset(self.schemas), type_check=False)
                    if kwargs is None:
                        raise ValueError(err)
                    ev.gt_parsed.append({"name": p.name, "arguments": kwargs})
                except Exception as exc:  # noqa: BLE001 - recorded, excluded from weights
                    ev.gt_error = f"{call}: {exc}"
        self.turn = 0
        self.steps = 0
        self.steps_in_turn = 0
        self.done = False
        self.force_terminated = False
        self.success = False
        self.model_results: list[str] = []  # all executed results so far (bfcl's all_turn_...)
        self.turns[0].reached = True

    # ------------------------------------------------------------------- text --------

    def tool_docs(self, names: set[str] | list[str]) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in self.schemas[n].items() if not k.startswith("_")} for n in self.schemas if n in set(names)
        ]

    def user_message(self, turn: int) -> str:
        messages = self.entry["question"][turn]
        if turn in self.missed:
            docs = self.tool_docs(self.missed[turn])
            return self.render_tools(docs) + "\n" + ADDITIONAL_FUNCTION_PROMPT
        return "\n".join(m["content"] for m in messages if m.get("role") == "user")

    def first_observation(self) -> str:
        return self.user_message(0)

    # ------------------------------------------------------------------- step --------

    def step(self, text: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self.done:
            raise RuntimeError("episode is over; call reset()")
        self.steps += 1
        ev = self.turns[self.turn]
        parsed = parse_turn(text, self.call_format, max_chars=self.max_action_chars, max_calls=self.max_calls_per_step)
        info: dict[str, Any] = {
            "turn": self.turn,
            "n_turns": len(self.turns),
            "calls": [],
            "turn_ended": False,
            "action_valid": True,
            "messages": [],
        }
        broken = self._decode_failure(parsed)
        if broken:  # bfcl's decoder rejects the whole step: nothing runs, the turn ends
            ev.steps.append([r.to_json() for r in broken])
            info.update(
                calls=[r.to_json() for r in broken],
                action_valid=False,
                decode_error="; ".join(r.error or "" for r in broken),
            )
        elif parsed.has_calls:
            return self._execute_step(ev, parsed, info)
        return self._end_turn(ev, info)

    def _decode_failure(self, parsed: Any) -> list[CallRecord]:
        """The parse-error records of a step bfcl could not decode (empty if it could)."""
        if parsed.error is not None:
            return [CallRecord(None, {}, PARSE_ERROR, f"Error: {parsed.error}.", parsed.error, "parse_error")]
        bad = [c for c in parsed.calls if c.error is not None]
        return [self.model.execute(c, frozenset(), self.type_check) for c in bad]

    def _execute_step(
        self, ev: TurnEvidence, parsed: Any, info: dict[str, Any]
    ) -> tuple[str, float, bool, dict[str, Any]]:
        # bfcl executes any method of the involved instances: ``available`` only decides
        # which schemas the prompt shows (held-out miss_func tools run if called early)
        callable_tools = frozenset(self.schemas)
        records = [self.model.execute(c, callable_tools, self.type_check) for c in parsed.calls]
        parts = []
        for rec in records:
            self.model_results.append(rec.result)  # every call here was decoded
            text_out = rec.result
            if self.hint is not None and rec.failed:
                h = self.hint(rec, self.schemas.get(rec.name or "", {}))
                if h:
                    text_out += f"\nHint: {h}"
            parts.append(text_out)
        ev.steps.append([r.to_json() for r in records])
        info["calls"] = [r.to_json() for r in records]
        self.steps_in_turn += 1
        if self.steps_in_turn > self.max_steps_per_turn:  # bfcl: count > MAXIMUM_STEP_LIMIT
            return self._finish(forced=True, info=info)
        if self.max_steps and self.steps >= self.max_steps:
            return self._finish(forced=True, info=info)
        info["messages"] = [{"role": "tool", "content": p} for p in parts]
        return self._format_results(parts), 0.0, False, info

    def _end_turn(self, ev: TurnEvidence, info: dict[str, Any]) -> tuple[str, float, bool, dict[str, Any]]:
        info["turn_ended"] = True
        self._check_turn(ev)
        if self.turn + 1 >= len(self.turns):
            return self._finish(forced=False, info=info)
        if self.max_steps and self.steps >= self.max_steps:  # optional episode cap
            return self._finish(forced=True, info=info)
        self.turn += 1
        self.steps_in_turn = 0
        self.turns[self.turn].reached = True
        self.turns[self.turn].state_equal_before = bool(ev.state_equal)
        if self.turn in self.missed:
            self.available |= set(self.missed[self.turn])
        message = self.user_message(self.turn)
        info["messages"] = [{"role": "user", "content": message}]
        return message, 0.0, False, info

    def _format_results(self, parts: list[str]) -> str:
        if self.call_format == "qwen":
            return "\n".join(f"<tool_response>\n{p}\n</tool_response>" for p in parts)
        return "\n".join(parts)

    # ----------------------------------------------------------------- checks --------

    def _check_turn(self, ev: TurnEvidence) -> None:
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import response_checker, state_checker  # noqa: PLC0415

        ev.checked = True
        gt_records = []
        for call in ev.gt_parsed:
            rec = self.truth.execute(
                ParsedCall(call["name"], dict(call["arguments"])), frozenset(self.schemas), type_check=False
            )
            gt_records.append(rec)
            if not rec.executed:
                ev.gt_error = ev.gt_error or f"{call['name']}: {rec.error}"
        ev.gt_results = [r.result for r in gt_records]
        try:
            state = state_checker(self.model.instances, self.truth.instances)
            ev.state_equal = bool(state["valid"])
            if not state["valid"]:
                ev.state_diff = {}
                for cls, inst in self.truth.instances.items():
                    diffs = _differences(self.model.instances[cls], inst)
                    if diffs:
                        ev.state_diff[cls] = diffs
            resp = response_checker(list(self.model_results), list(ev.gt_results), ev.turn)
            ev.response_ok = bool(resp["valid"])
            ev.missing_responses = list(resp.get("details", {}).get("missing_items", []))
        except Exception as exc:  # noqa: BLE001 - recorded as checker_error
            ev.checker_error = f"{type(exc).__name__}: {exc}"
        if ev.gt_empty:
            ev.official = "skipped"
        elif not ev.decoded_calls():
            ev.official = "empty_turn_model_response"
        elif ev.checker_error:
            ev.official = "checker_error"
        elif not ev.state_equal:
            ev.official = "instance_state_mismatch"
        elif not ev.response_ok:
            ev.official = "execution_response_mismatch"
        else:
            ev.official = "pass"

    def official_result(self) -> dict[str, Any]:
        """bfcl's verdict: valid, or the error type of the first failing turn."""
        if self.force_terminated:
            return {"valid": False, "error_type": "multi_turn:force_terminated"}
        for ev in self.turns:
            if ev.official in ("pass", "skipped"):
                continue
            return {"valid": False, "error_type": f"multi_turn:{ev.official}", "turn": ev.turn}
        return {"valid": True}

    def _finish(self, forced: bool, info: dict[str, Any]) -> tuple[str, float, bool, dict[str, Any]]:
        ev = self.turns[self.turn]
        if not ev.checked:  # force-terminated mid-turn: check it anyway, for the evidence only
            self._check_turn(ev)
        self.done = True
        self.force_terminated = forced
        result = self.official_result()
        self.success = bool(result["valid"])
        info.update({"success": self.success, "force_terminated": forced, "official": result})
        return "", float(self.success), True, info

    # ----------------------------------------------------------------- expert --------

    def expert_action(self) -> str:
        """The ground-truth turn: the turn's calls in one step (in chunks of
        ``max_calls_per_step``), then plain text to end the turn. Meant for replay from the
        start of a turn: calls the policy already made in the turn count as done."""
        ev = self.turns[self.turn]
        done = sum(len(step) for step in ev.steps)  # calls already made in this turn
        if ev.gt_parsed and done < len(ev.gt_parsed):
            chunk = ev.gt_parsed[done : done + self.max_calls_per_step]
            return render_calls([(c["name"], c["arguments"]) for c in chunk], self.call_format)
        if ev.gt_empty:
            return (
                "I cannot complete this request with the functions and information I "
                "have; please provide what is missing."
            )
        return "Done: I have completed the requested operations."

    def evidence(self) -> list[TurnEvidence]:
        return self.turns


def _differences(model_obj: Any, truth_obj: Any) -> list[str]:
    out = []
    for attr in vars(truth_obj):
        if attr.startswith("_"):
            continue
        if getattr(model_obj, attr, None) != getattr(truth_obj, attr):
            out.append(attr)
    return out
