"""Batched sampling with HF transformers that keeps token ids and log-probs.

Token-in-token-out (``docs/design.md#decisions``): the engine returns the exact prompt ids and generated
ids with their log-probs under the sampling policy, so training never re-tokenises text.

We run our own decode loop instead of ``model.generate`` because it lets finished rows
leave the batch (the KV cache is sliced each time one finishes), checks stop strings per
row, and draws from a dedicated ``torch.Generator`` so rollouts are reproducible
independently of other random consumers. With ``hf_engine.decode`` static or compiled
(:mod:`roleagent.engine.static_decode`) the same loop runs on fixed shapes instead: a
preallocated cache and mask, every row kept to the batch's end, the decode step compiled.

Automatic prefix reuse (``prefix_cache_tokens > 0``; see :mod:`roleagent.engine.prefix_cache`):
after each call the KV of every row's processed sequence is kept in a bounded LRU store,
and a later prompt that starts with a stored sequence (or shares a long prefix with one)
prefills only the rest. Stored KVs are dropped when the weights change
(:meth:`HFEngine.weights_changed`, and automatically when a parameter's version moves).
Reuse changes what is computed, not what is generated: the tests compare tokens and
log-probs with and without it.

Log-probs are of the temperature-scaled distribution that was sampled from
(``log_softmax(logits / T)``); the trainer scales logits by the same T. At T = 0 the
engine decodes greedily and reports log-probs at T = 1.

Constrained rows (``generate(..., allowed=...)``, :mod:`roleagent.engine.constrain`) may
only emit tokens that continue one of their allowed sequences and finish when one is
complete; their distribution is renormalised over the allowed tokens
(``log_softmax(restrict(logits / T))``, greedy: the argmax among them), and each
generated position's allowed set comes back in ``Generation.allowed``. Their length limit
is their longest sequence, not ``max_new_tokens`` (a command is never cut); stop strings
and EOS do not apply to them. Once a single sequence remains below a row's position
(``TrieCursor.forced_tail``: typically the rest of a command's last word and its closing
tag), its tokens are appended with log-prob 0 and the row leaves the batch: those forwards
could change no token, log-prob or gradient. Only the random draws they would have used
shift, so seeded sampled runs differ from token-by-token decoding in their draws, not their
distribution; greedy runs are identical.
"""

from __future__ import annotations

import inspect

import torch

from roleagent.allocator import trim_heap
from roleagent.engine.base import Allowed, Generation, SamplingParams
from roleagent.engine.chat import encode_chat, encode_followup
from roleagent.engine.command_greedy import best_sequences
from roleagent.engine.constrain import TokenTrie, TrieCursor, sample_rows
from roleagent.engine.kv_arena import KVArena, eager_advance, full_attention_layers, row_chunks
from roleagent.engine.prefix_cache import PrefixCache, PrefixEntry, batch_cache, plain_dynamic, row_kv
from roleagent.engine.static_decode import DECODES, HFEngineConfig, decode_step, static_advance, static_batch
from roleagent.models.loading import Policy, kept_positions
from roleagent.models.precision import autocast_region

__all__ = ["Generation", "HFEngine", "HFEngineConfig", "SamplingParams", "encode_chat"]


class HFEngine:
    """Generation and chat encoding for one :class:`Policy` (implements
    :class:`roleagent.engine.base.Engine`); ``settings``: the ``hf_engine`` section
    (:mod:`roleagent.engine.static_decode`)."""

    config_class = HFEngineConfig
    config_section = "hf_engine"  # the config's typed section holding these settings

    def __init__(
        self,
        policy: Policy,
        *,
        settings: HFEngineConfig | None = None,
        max_batch: int = 32,
        max_prompt_tokens: int = 1024,
        prefix_cache_tokens: int = 0,
    ):
        self.settings = settings if settings is not None else HFEngineConfig()
        if self.settings.decode not in DECODES:
            raise ValueError(f"hf_engine.decode={self.settings.decode!r}: choose one of {', '.join(DECODES)}")
        if self.settings.decode != "eager" and prefix_cache_tokens > 0:
            raise ValueError(f"hf_engine.decode={self.settings.decode} keeps no prefix KV: set prefix_cache_tokens=0")
        self.policy = policy
        self.tokenizer = policy.tokenizer
        self.max_batch = max_batch
        self.max_prompt_tokens = max_prompt_tokens
        self.generator = torch.Generator(device=policy.device)
        self.generator.manual_seed(0)
        self.generated_tokens = 0  # counters for tokens/s metrics
        self.prompt_tokens = 0  # prompt tokens prefilled (not counting reused ones)
        self.reused_prompt_tokens = 0  # prompt tokens whose stored KV was reused
        # Automatic prefix reuse (off at 0): up to this many tokens of KV kept across calls.
        self.prefix_cache = PrefixCache(prefix_cache_tokens) if prefix_cache_tokens > 0 else None
        self._adapter_layers = [
            m for m in policy.model.modules() if hasattr(m, "disable_adapters") and hasattr(m, "merged")
        ]  # PEFT tuner layers
        self._weights_seen = self._weights_fingerprint() if self.prefix_cache is not None else 0
        # transformers >= 5.x renamed ``past_key_values`` to ``cache`` (input and output).
        base = getattr(policy.model, "get_base_model", lambda: policy.model)()
        forward_args = inspect.signature(base.forward).parameters
        self._model_config = base.config
        self._decode = decode_step(self._forward, self.settings)  # the decode steps' forward (compiled or not)
        self._cache_kwarg = "cache" if "cache" in forward_args else "past_key_values"
        # Only the last position's logits are sampled from: skip the LM head elsewhere (in a
        # prefill of n tokens it is ~20% of SmolLM2-135M's FLOPs and an n x vocab tensor).
        self._keep_last = "logits_to_keep" in forward_args
        self._arena_layers = full_attention_layers(base.config)  # 0: transformers' cache (kv_arena)

    def seed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def get_rng_state(self) -> torch.Tensor:
        return self.generator.get_state()

    def set_rng_state(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)

    # --------------------------------------------------------------- prompts ---------

    def encode_chat(self, messages: list[dict[str, str]], *, response_prefix: str = "") -> list[int]:
        """Chat-template ids ending with the assistant header (plus an optional prefix).

        Message contents stay text: a ``<|im_end|>`` inside an observation is encoded as
        the characters, not the special token (see :func:`encode_chat`). Prompts longer
        than ``max_prompt_tokens`` keep their last tokens; callers build bounded prompts,
        so this only guards against runaway observations.
        """
        ids = encode_chat(self.tokenizer, messages, response_prefix=response_prefix)
        return ids[-self.max_prompt_tokens :]

    def extend_chat(
        self,
        prompt_ids: list[int],
        generated_ids: list[int],
        messages: list[dict[str, str]],
        *,
        response_prefix: str = "",
    ) -> list[int] | None:
        """A prompt that continues ``prompt_ids`` + ``generated_ids`` (an assistant turn as
        sampled) with ``messages`` and a new assistant turn, token for token, so that with
        prefix reuse only the new part is prefilled. E.g. the World-In-Agent prediction
        prompt: ``extend_chat(action_prompt, action.ids, [{"role": "user", "content":
        request}], response_prefix="<state1>")``. The ids of ``generated_ids`` are kept as
        sampled (not re-tokenised from text); an end-of-turn token the model already
        emitted is not repeated. ``None`` when longer than ``max_prompt_tokens`` (never
        truncated: a cut continuation would be neither the conversation nor reusable)."""
        tail = encode_followup(self.tokenizer, messages, response_prefix=response_prefix)
        if generated_ids and tail and generated_ids[-1] == tail[0] == self.tokenizer.eos_token_id:
            tail = tail[1:]
        ids = list(prompt_ids) + list(generated_ids) + tail
        return ids if len(ids) <= self.max_prompt_tokens else None

    # ------------------------------------------------------------- generation --------

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams, allowed: Allowed = None) -> list[Generation]:
        """Sample one continuation per prompt, in chunks of at most ``max_batch`` rows.
        ``allowed`` (None, or one entry per prompt: None or a list of token sequences)
        constrains rows to those sequences (:mod:`roleagent.engine.constrain`)."""
        if allowed is not None and len(allowed) != len(prompts):
            raise ValueError(f"allowed has {len(allowed)} entries for {len(prompts)} prompts")
        if params.greedy not in ("token", "command"):
            raise ValueError(f"SamplingParams.greedy must be 'token' or 'command', not {params.greedy!r}")
        rows = [None] * len(prompts) if allowed is None else [None if a is None else TokenTrie(a) for a in allowed]
        command_greedy = params.temperature <= 0 and params.greedy == "command"
        scored = [i for i, t in enumerate(rows) if t is not None] if command_greedy else []
        decoded = sorted(set(range(len(prompts))) - set(scored))
        results: list[Generation | None] = [None] * len(prompts)
        with autocast_region(self.policy.model):  # bf16: fp32 master weights cast once, not per token
            for part, run in ((decoded, self._generate_batch), (scored, self._best_sequences)):
                for start in range(0, len(part), self.max_batch):
                    chunk = part[start : start + self.max_batch]
                    batch = run([prompts[i] for i in chunk], params, [rows[i] for i in chunk])
                    for i, generation in zip(chunk, batch):
                        results[i] = generation
                    if self.settings.trim_heap:
                        trim_heap()
        return results

    def _best_sequences(self, prompts, params: SamplingParams, tries: list[TokenTrie]) -> list[Generation]:
        """Whole-command greedy (:mod:`roleagent.engine.command_greedy`), under ``generate``'s no_grad."""
        return best_sequences(self, prompts, tries)

    def _generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, tries: list[TokenTrie | None]
    ) -> list[Generation]:
        model = self.policy.model
        device = self.policy.device
        eos_ids = {self.tokenizer.eos_token_id}
        was_training = model.training
        model.eval()

        n = len(prompts)
        static = self.settings.decode != "eager"  # fixed shapes: every row stays, cache and mask preallocated
        step_input, attention, step_positions, reuse = self._prefill_inputs(prompts)
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_logprobs: list[list[float]] = [[] for _ in range(n)]
        cursors = [None if t is None else TrieCursor(t) for t in tries]
        out_allowed: list[list[list[int]]] = [[] for _ in range(n)]
        # a constrained row runs to the end of its longest sequence, never cut at max_new_tokens
        limits = [params.max_new_tokens if t is None else t.longest for t in tries]
        truncated = [True] * n
        fed = [None] * n  # generated tokens whose KV the cache holds, when not all but the last
        alive = list(range(n))  # original row index of each live row (eager: of each row in the batch)
        logits, cache, attention, filled = self._prefill(step_input, attention, step_positions, reuse, max(limits))
        for step in range(max(limits)):
            if step:
                output = self._decode(step_input, attention, step_positions, cache)
                cache = getattr(output, self._cache_kwarg)
                logits = output.logits[:, -1, :]  # (b, V); static: (n, V), of which the live rows are sampled
            rows = torch.tensor(alive, device=device) if static else None
            logits = (logits if rows is None else logits[rows]).float()  # in alive's order: the eager draws
            allowed = {(row,): cursors[i].allowed() for row, i in enumerate(alive) if cursors[i] is not None}
            tokens, logprobs = self._sample(logits, params, allowed)  # (b,), (b,)
            # one host transfer per step: on a GPU each int(tokens[row]) would wait for the device
            step_tokens, step_logprobs = tokens.tolist(), logprobs.tolist()
            keep: list[int] = []
            for row, original in enumerate(alive):
                token = step_tokens[row]
                out_ids[original].append(token)
                out_logprobs[original].append(step_logprobs[row])
                if cursors[original] is not None:
                    out_allowed[original].append(allowed[(row,)])
                    finished = cursors[original].advance(token)
                    if not finished and (tail := cursors[original].forced_tail()):  # one sequence left:
                        fed[original], finished = step, cursors[original].advance_all(tail)  # no forwards
                        out_ids[original] += tail
                        out_logprobs[original] += [0.0] * len(tail)  # each token the only one allowed
                        out_allowed[original] += [[t] for t in tail]
                else:
                    finished = token in eos_ids or self._hit_stop(out_ids[original], params.stop)
                if finished:
                    truncated[original] = False
                elif step + 1 < limits[original]:
                    keep.append(row)
            last = not keep
            if not static:  # the prefix store keeps each leaving row's KV
                leaving = range(len(alive)) if last else sorted(set(range(len(alive))) - set(keep))
                self._store_rows(cache, attention, [(r, alive[r]) for r in leaving], prompts, out_ids, fed)
            if last:
                break
            if static:
                step_input, step_positions = static_advance(step_input, attention, step_positions, filled, rows, tokens)
                filled += 1
            else:
                step_input, attention, step_positions = eager_advance(cache, attention, step_positions, tokens, keep)
            alive = [alive[row] for row in keep]

        self.generated_tokens += sum(map(len, out_ids))
        if was_training:
            model.train()
        decode = self.tokenizer.decode
        outputs = zip(prompts, out_ids, out_logprobs, truncated, tries, out_allowed)
        return [
            Generation(list(p), ids, lps, decode(ids, skip_special_tokens=True), cut, None if t is None else seen)
            for p, ids, lps, cut, t, seen in outputs
        ]

    def _forward(self, ids, attention, positions, cache, *, every_position: bool = False):
        """One cached forward; the logits of the last position only unless ``every_position``
        (a prefill's by index, :func:`~roleagent.models.loading.kept_positions`)."""
        width = ids.shape[1]
        last = 1 if width == 1 else kept_positions(width - 1, width, ids.device)
        last = {"logits_to_keep": last} if self._keep_last and not every_position else {}
        return self.policy.model(
            input_ids=ids,
            attention_mask=attention,
            position_ids=positions,
            use_cache=True,
            **{self._cache_kwarg: cache},
            **last,
        )

    def _prefill(self, step_input, attention, positions, reuse, new_tokens: int):
        """The first forward: the last positions' logits (n, V), the cache to decode from
        (room for ``new_tokens`` more positions), the mask and its columns in use.
        ``decode`` static/compiled: a ``StaticCache`` and its full-width mask (never
        compiled: the prefill's width varies). Eager with ``hf_engine.arena`` (and only
        full-attention layers): a :class:`~roleagent.engine.kv_arena.KVArena`, the rows
        prefilled in chunks of ``hf_engine.prefill_tokens``. Else transformers' own cache."""
        n, width = attention.shape
        width_c = width - step_input.shape[1]  # C: the reused prefixes' width
        if self.settings.decode != "eager" or not (self.settings.arena and self._arena_layers):
            cache = batch_cache(reuse, width_c) if width_c else None
            if self.settings.decode != "eager":
                attention, cache, width = static_batch(
                    self._model_config, attention, new_tokens, self.settings.cache_bucket
                )
            output = self._forward(step_input, attention, positions, cache)
            return output.logits[:, -1, :], getattr(output, self._cache_kwarg), attention, width
        arena = KVArena(self._arena_layers, n, width + new_tokens, reuse, width_c)
        logits = []
        for rows in row_chunks(n, step_input.shape[1], self.settings.prefill_tokens):
            part = slice(rows.start, rows.stop)
            output = self._forward(step_input[part], attention[part], positions[part], arena.cache(rows, width_c))
            logits.append(output.logits[:, -1, :])
        return torch.cat(logits), arena.cache(length=width), attention, width

    def _prefill_inputs(self, prompts: list[list[int]]):
        """Input ids, attention mask, position ids and the reused prefixes of the first forward.

        Row i reuses ``c_i`` stored tokens (0 without a stored prefix) and prefills the
        other ``s_i = len(prompt) - c_i >= 1``. The cache holds the stored KVs left-padded
        to C = max c_i, the inputs hold the suffixes left-padded to S = max s_i, so the
        mask over the C + S key positions of row i is ``0…0 1×c_i 0…0 1×s_i``: pads sit in
        the middle, hidden from every query by the explicit mask, and a suffix token's
        position id counts the ones before it (c_i + j), as if the prompt were unpadded.
        Without reuse (C = 0) this is plain left padding. Reused prefixes: ``(entry, c_i)``.
        """
        device = self.policy.device
        n = len(prompts)
        reuse = self._lookup_prefixes(prompts)  # (entry or None, c_i) per row
        cached = [c for _, c in reuse]
        width_c = max(cached)
        width_s = max(len(p) - c for p, c in zip(prompts, cached))
        input_ids = torch.full((n, width_s), self.tokenizer.pad_token_id, dtype=torch.long, device=device)
        attention = torch.zeros((n, width_c + width_s), dtype=torch.long, device=device)  # (n, C+S)
        for row, (ids, c) in enumerate(zip(prompts, cached)):
            suffix = ids[c:]
            input_ids[row, width_s - len(suffix) :] = torch.tensor(suffix, device=device)
            attention[row, width_c - c : width_c] = 1
            attention[row, width_c + width_s - len(suffix) :] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, width_c:]  # (n, S)
        self.prompt_tokens += sum(len(p) for p in prompts) - sum(cached)
        self.reused_prompt_tokens += sum(cached)
        return input_ids, attention, positions, reuse

    # ------------------------------------------------------------ prefix reuse -------

    def clear_prefix_cache(self) -> None:
        """Drop every stored KV (they were computed with weights that may be stale)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    def weights_changed(self) -> None:
        """Tell the engine the policy's weights changed (call after each optimizer step or
        checkpoint load): stored KVs are dropped."""
        self.clear_prefix_cache()
        self._weights_seen = self._weights_fingerprint()

    def _weights_fingerprint(self) -> int:
        """Changes whenever a parameter is written in place (``_version``: optimizer steps,
        ``load_state_dict``, adapter merges), replaced (``data_ptr``) or a LoRA adapter is
        switched on/off, so stale KVs are dropped even if nobody calls weights_changed.
        Not seen: ``torch.optim.AdamW(fused=True)`` (torch 2.13) steps without bumping
        ``_version``, and writes through ``.data``; hence the explicit weights_changed."""
        params = tuple((p._version, p.data_ptr()) for p in self.policy.model.parameters())
        adapters = tuple(bool(getattr(m, "disable_adapters", False)) for m in self._adapter_layers)
        return hash((params, adapters))

    def _lookup_prefixes(self, prompts: list[list[int]]) -> list[tuple[PrefixEntry | None, int]]:
        if self.prefix_cache is None:
            return [(None, 0)] * len(prompts)
        fingerprint = self._weights_fingerprint()
        if fingerprint != self._weights_seen:
            self.prefix_cache.clear()
            self._weights_seen = fingerprint
        out = []
        for prompt in prompts:
            entry, length = self.prefix_cache.lookup(prompt)
            length = min(length, len(prompt) - 1)  # the last prompt token is fed to get logits
            out.append((entry, length) if length > 0 else (None, 0))
        return out

    def _store_rows(self, cache, attention: torch.Tensor, rows, prompts, out_ids, fed) -> None:
        """Store the KV of each leaving (batch row, original index): prompt plus every
        generated token but the last (whose KV was never computed), or but a forced tail's
        (``fed[original]`` tokens were fed)."""
        if self.prefix_cache is None or not rows or not plain_dynamic(cache):
            return
        for row, original in rows:
            done = out_ids[original][:-1] if fed[original] is None else out_ids[original][: fed[original]]
            tokens = list(prompts[original]) + done
            index = attention[row].nonzero().squeeze(-1)  # the row's non-pad positions
            if len(index) != len(tokens) or len(tokens) > self.prefix_cache.max_tokens:
                continue
            self.prefix_cache.insert(tokens, row_kv(cache, row, index))

    def _sample(
        self, logits: torch.Tensor, params: SamplingParams, allowed: dict[tuple[int], list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens and their log-probs at the sampling temperature; rows in ``allowed`` draw
        from the distribution renormalised over their allowed tokens (greedy: argmax
        among them), :func:`roleagent.engine.constrain.sample_rows`."""
        greedy = params.temperature <= 0
        scaled = logits if greedy else logits / params.temperature  # (b, V)
        return sample_rows(scaled, allowed, greedy=greedy, top_p=params.top_p, generator=self.generator)

    def _hit_stop(self, ids: list[int], stop: tuple[str, ...]) -> bool:
        """A stop string occurs in the generated text after its leading whitespace, so a
        newline stop ends a line of content, not the blank line a model may start with."""
        if not stop:
            return False
        text = self.tokenizer.decode(ids[-24:], skip_special_tokens=True)
        if len(ids) <= 24:
            text = text.lstrip()
        return any(s in text for s in stop)
