"""The engine protocol: what rollouts, roles and the trainer need from a generator.

``roleagent.rollout``, the roles and the training loop talk to this protocol only, so a second
engine (an OpenAI-compatible server, vLLM) is added without touching them. An engine
turns chats into token ids (the exact ids the policy is trained on) and generates from
batches of token-id prompts, returning the generated ids with their sampling log-probs::

    prompt = engine.encode_chat([{"role": "user", "content": "hi"}], response_prefix="<action>")
    [g] = engine.generate([prompt], SamplingParams(max_new_tokens=16, temperature=0.9))
    g.prompt_ids, g.ids, g.logprobs, g.text      # token in, token out
    # constrained to two commands' token sequences: g.ids is one of them
    [g] = engine.generate([prompt], params, allowed=[[[5, 6, 7], [5, 8]]])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass
class Generation:
    prompt_ids: list[int]
    ids: list[int]  # generated tokens, including the stop token when one was hit
    logprobs: list[float]  # one per generated token, log π of the distribution sampled from
    text: str  # decoded ``ids`` without special tokens
    truncated: bool  # stopped by max_new_tokens rather than a stop string or EOS
    # constrained rows: per generated token, the sorted token ids it was sampled among
    # (its log-prob is renormalised over them); None for free generation
    allowed: list[list[int]] | None = None


#: ``Engine.generate``'s constraint: None (all rows free) or one entry per prompt, None
#: (free) or the token sequences the row must produce one of.
Allowed = list[list[list[int]] | None] | None


@dataclass
class SamplingParams:
    max_new_tokens: int = 48
    temperature: float = 1.0  # 0: greedy (log-probs then at T = 1)
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    # greedy constrained rows: "token" takes the most likely allowed token at each position,
    # "command" the allowed sequence of highest log-prob, Σ_t log π(token_t | allowed_t) at
    # T = 1 (the mode of the constrained policy, which token-by-token argmax can miss)
    greedy: str = "token"


@runtime_checkable
class Engine(Protocol):
    """Chat encoding and batched generation for one policy."""

    tokenizer: Any  # a transformers tokenizer (counting tokens, decoding)
    max_prompt_tokens: int  # prompts are left-truncated to this many tokens
    generated_tokens: int  # running counters, for tokens/s metrics
    prompt_tokens: int  # prefilled prompt tokens (reused ones not counted)
    # An engine class may set ``loads_weights = False`` (the OpenAI-compatible client): it
    # then gets a policy with the tokenizer alone (``roleagent.models.loading.engine_policy``).
    # Engines with prefix reuse may also keep ``reused_prompt_tokens`` (a counter) and
    # ``prefix_cache`` (with ``nbytes``); the rollout metrics read them when present.

    def encode_chat(self, messages: list[dict[str, str]], *, response_prefix: str = "") -> list[int]:
        """Token ids of ``messages`` under the model's chat template, ending with the
        assistant turn opened and ``response_prefix`` already written. Text inside messages
        never becomes a special token."""
        ...

    def extend_chat(
        self,
        prompt_ids: list[int],
        generated_ids: list[int],
        messages: list[dict[str, str]],
        *,
        response_prefix: str = "",
    ) -> list[int] | None:
        """A prompt that continues ``prompt_ids`` + ``generated_ids`` (an assistant turn as
        sampled, its ids kept) with ``messages`` and a newly opened assistant turn, token
        for token as :meth:`encode_chat` would encode the whole conversation. An engine
        with prefix reuse then prefills only the new part (World-In-Agent's prediction
        prompt, ``rollout.context=full``). ``None`` when the continuation would be longer
        than ``max_prompt_tokens``: a continuation is never truncated (the caller builds a
        shorter prompt instead)."""
        ...

    def generate(self, prompts: list[list[int]], params: SamplingParams, allowed: Allowed = None) -> list[Generation]:
        """One :class:`Generation` per prompt, in order. A row with ``allowed[i]`` (a
        list of token sequences) emits exactly one of those sequences: each token is drawn
        among those that continue some sequence, from the distribution renormalised over
        them (greedy: their argmax), its allowed set kept in ``Generation.allowed``; it
        finishes when a full sequence is emitted, however long (``max_new_tokens``, stop
        strings and EOS apply to free rows only). At temperature 0 with ``params.greedy``
        = "command" a constrained row returns its most likely sequence; engines that
        cannot score sequences raise ``ValueError``."""
        ...

    def weights_changed(self) -> None:
        """The policy's weights changed (after an optimizer step or a checkpoint load):
        drop anything computed with the old ones (stored prefix KV). A no-op for engines
        that keep nothing between calls."""
        ...

    def seed(self, seed: int) -> None:
        """Reset the sampling random generator."""
        ...

    def get_rng_state(self) -> Any:
        """The sampling generator's state (saved in checkpoints, restored around evaluation)."""
        ...

    def set_rng_state(self, state: Any) -> None: ...
