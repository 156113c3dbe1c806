"""Shared fixtures: a tiny random policy, a scripted engine, a crashing environment."""

from __future__ import annotations

import os

import pytest

from roleagent.engine.hf import Generation
from roleagent.envs import EnvSpec, register_env
from roleagent.envs.base import EnvironmentCrashed
from roleagent.envs.scripted import ScriptedEnv

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class CrashingEnv(ScriptedEnv):
    """ScriptedEnv whose worker process dies on the action ``crash`` and whose simulator
    is lost (``EnvironmentCrashed``) on ``lost``."""

    name = "crashing"

    def step(self, action: str):
        if action.strip() == "crash":
            os._exit(3)
        if action.strip() == "lost":
            raise EnvironmentCrashed("the simulator exited")
        return super().step(action)


register_env(EnvSpec("crashing", "tests.conftest:CrashingEnv", (), "dev", "test env that dies on 'crash'"))


class ScriptedEngine:
    """An engine stand-in: answers each prompt with ``respond(prompt_text, call_index)``.

    Token ids are the characters' code points (any ids work for rollout logic); log-probs
    are -1 per token. Counts calls so tests can check batching.
    """

    def __init__(self, respond):
        self.respond = respond
        self.calls: list[int] = []  # batch size of each generate call
        self.generated_tokens = 0
        self.prompt_tokens = 0
        self.last_prompts: list[str] = []

    def encode_chat(self, messages, *, response_prefix=""):
        text = "\n".join(m["content"] for m in messages) + "\n" + response_prefix
        return [ord(c) % 5000 for c in text]

    max_prompt_tokens = 1 << 30

    def extend_chat(self, prompt_ids, generated_ids, messages, *, response_prefix=""):
        ids = list(prompt_ids) + list(generated_ids) + self.encode_chat(messages, response_prefix=response_prefix)
        return ids if len(ids) <= self.max_prompt_tokens else None

    def weights_changed(self):
        pass

    def generate(self, prompts, params):
        self.calls.append(len(prompts))
        texts = ["".join(chr(i) for i in p) for p in prompts]
        self.last_prompts = texts
        out = []
        for text in texts:
            reply = self.respond(text, len(self.calls) - 1)
            ids = [ord(c) for c in reply]
            self.generated_tokens += len(ids)
            out.append(
                Generation(
                    prompt_ids=[ord(c) % 5000 for c in text],
                    ids=ids,
                    logprobs=[-1.0] * len(ids),
                    text=reply,
                    truncated=False,
                )
            )
        return out


@pytest.fixture
def scripted_engine():
    return ScriptedEngine


@pytest.fixture(scope="session")
def tiny_policy():
    pytest.importorskip("transformers")
    from roleagent.models.loading import load_policy

    return load_policy("tiny", device="cpu", dtype="float32", seed=0)
