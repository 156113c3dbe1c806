"""Batched sampling with HF transformers that keeps token ids and log-probs.

Token-in-token-out (``docs/design.md#decisions``): the engine returns the exact prompt ids and generated
ids with their log-probs under the sampling policy, so training never re-tokenises text.

We run our own decode loop instead of ``model.generate`` because it lets finished rows
leave the batch (the KV cache is sliced each time one finishes), checks stop strings per
row, and draws from a dedicated ``torch.Generator`` so rollouts are reproducible
independently of other random consumers.

Log-probs are of the temperature-scaled distribution that was sampled from
(``log_softmax(logits / T)``); the trainer scales logits by the same T. At T = 0 the
engine decodes greedily and reports log-probs at T = 1.
"""

from __future__ import annotations

import inspect
import re

import torch

from roleagent.engine.base import Generation, SamplingParams
from roleagent.models.loading import Policy

__all__ = ["Generation", "HFEngine", "SamplingParams", "encode_chat"]


class HFEngine:
    """Generation and chat encoding for one :class:`Policy` (implements
    :class:`roleagent.engine.base.Engine`)."""

    def __init__(self, policy: Policy, *, max_batch: int = 32, max_prompt_tokens: int = 1024):
        self.policy = policy
        self.tokenizer = policy.tokenizer
        self.max_batch = max_batch
        self.max_prompt_tokens = max_prompt_tokens
        self.generator = torch.Generator(device=policy.device)
        self.generator.manual_seed(0)
        self.generated_tokens = 0  # counters for tokens/s metrics
        self.prompt_tokens = 0
        # transformers >= 5.x renamed ``past_key_values`` to ``cache`` (input and output).
        base = getattr(policy.model, "get_base_model", lambda: policy.model)()
        self._cache_kwarg = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"

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

    # ------------------------------------------------------------- generation --------

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """Sample one continuation per prompt, in chunks of at most ``max_batch`` rows."""
        results: list[Generation] = []
        for start in range(0, len(prompts), self.max_batch):
            results.extend(self._generate_batch(prompts[start : start + self.max_batch], params))
        return results

    def _generate_batch(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        model = self.policy.model
        device = self.policy.device
        pad_id = self.tokenizer.pad_token_id
        eos_ids = {self.tokenizer.eos_token_id}
        was_training = model.training
        model.eval()

        n = len(prompts)
        width = max(len(p) for p in prompts)
        input_ids = torch.full((n, width), pad_id, dtype=torch.long, device=device)  # (n, L)
        attention = torch.zeros((n, width), dtype=torch.long, device=device)  # (n, L)
        for row, ids in enumerate(prompts):  # left padding
            input_ids[row, width - len(ids) :] = torch.tensor(ids, device=device)
            attention[row, width - len(ids) :] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)  # (n, L)
        self.prompt_tokens += sum(len(p) for p in prompts)

        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_logprobs: list[list[float]] = [[] for _ in range(n)]
        truncated = [True] * n
        alive = list(range(n))  # original row index of each row still in the batch
        cache = None
        step_input, step_positions = input_ids, positions
        for _ in range(params.max_new_tokens):
            output = model(
                input_ids=step_input,
                attention_mask=attention,
                position_ids=step_positions,
                use_cache=True,
                **{self._cache_kwarg: cache},
            )
            cache = getattr(output, self._cache_kwarg)
            logits = output.logits[:, -1, :].float()  # (b, V)
            tokens, logprobs = self._sample(logits, params)  # (b,), (b,)
            keep: list[int] = []
            for row, original in enumerate(alive):
                token = int(tokens[row])
                out_ids[original].append(token)
                out_logprobs[original].append(float(logprobs[row]))
                if token in eos_ids or self._hit_stop(out_ids[original], params.stop):
                    truncated[original] = False
                else:
                    keep.append(row)
            self.generated_tokens += len(alive)
            if not keep:
                break
            if len(keep) < len(alive):  # finished rows leave the batch
                index = torch.tensor(keep, device=device)
                _select_cache_rows(cache, index)
                attention, tokens, step_positions = attention[index], tokens[index], step_positions[index]
                alive = [alive[row] for row in keep]
            attention = torch.cat([attention, attention.new_ones((len(alive), 1))], dim=1)  # (b, L+1)
            step_positions = step_positions[:, -1:] + 1  # (b, 1)
            step_input = tokens[:, None]  # (b, 1)

        if was_training:
            model.train()
        return [
            Generation(
                prompt_ids=list(prompts[i]),
                ids=out_ids[i],
                logprobs=out_logprobs[i],
                text=self.tokenizer.decode(out_ids[i], skip_special_tokens=True),
                truncated=truncated[i],
            )
            for i in range(n)
        ]

    def _sample(self, logits: torch.Tensor, params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
        if params.temperature <= 0:  # greedy
            logprobs = torch.log_softmax(logits, dim=-1)  # (b, V)
            tokens = logprobs.argmax(dim=-1)  # (b,)
            return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)
        logprobs = torch.log_softmax(logits / params.temperature, dim=-1)  # (b, V)
        probs = logprobs.exp()  # (b, V)
        if params.top_p < 1.0:
            sorted_probs, order = probs.sort(dim=-1, descending=True)  # (b, V)
            outside = sorted_probs.cumsum(-1) - sorted_probs > params.top_p  # (b, V)
            sorted_probs[outside] = 0.0
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)  # (b, V)
        tokens = torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)  # (b,)
        return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)

    def _hit_stop(self, ids: list[int], stop: tuple[str, ...]) -> bool:
        """A stop string occurs in the generated text after its leading whitespace, so a
        newline stop ends a line of content, not the blank line a model may start with."""
        if not stop:
            return False
        text = self.tokenizer.decode(ids[-24:], skip_special_tokens=True)
        if len(ids) <= 24:
            text = text.lstrip()
        return any(s in text for s in stop)


def _select_cache_rows(cache, index: torch.Tensor) -> None:
    """Keep only ``index`` rows of a transformers cache (DynamicCache or legacy tuples)."""
    if hasattr(cache, "batch_select_indices"):
        cache.batch_select_indices(index)
        return
    for layer in cache.layers:
        layer.batch_select_indices(index)


# ------------------------------------------------------------------ chat encoding ------

_MARK = "\ue000{}\ue001"  # private-use characters: a placeholder for message i's content
_MARK_RE = re.compile("\ue000(\\d+)\ue001")
_BREAK = "\u200b"  # zero-width space: the fallback's way to keep a special string text


def encode_chat(tokenizer, messages: list[dict], *, response_prefix: str = "") -> list[int]:
    """Token ids of a chat prompt in which only the chat template makes special tokens.

    Tokenising the rendered template as one string would turn a ``<|im_end|>`` written in
    an observation, instruction or tool result into the real end-of-turn token, so
    environment text could close the user's turn and open one of its own. Here the
    template is rendered once more with a placeholder for every message content; the
    special tokens of that skeleton (and of ``response_prefix``, which is ours) are the
    only ones kept special, and the text between them is tokenised with
    ``split_special_tokens=True``. A tokenizer splits its input at special tokens before
    anything else, so a prompt without special-token strings in its contents gets exactly
    the ids that plain tokenisation gives.

    When the template rewrites contents (the skeleton with the contents put back differs
    from the real rendering), special-token strings in contents are broken with a
    zero-width space instead, and the result is tokenised as usual.
    """
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    spans = _content_spans(tokenizer, messages, text)
    if spans is None:
        messages = [_break_specials(tokenizer, m) for m in messages]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        spans = []
    text += response_prefix
    specials = _special_tokens_re(tokenizer)
    ids: list[int] = []
    start = 0
    for match in specials.finditer(text) if specials else ():
        if any(a < match.end() and match.start() < b for a, b in spans):
            continue  # (partly) inside a message content: stays text
        ids += _encode_text(tokenizer, text[start : match.start()])
        ids.append(tokenizer.convert_tokens_to_ids(match.group()))
        start = match.end()
    return ids + _encode_text(tokenizer, text[start:])


def _encode_text(tokenizer, text: str) -> list[int]:
    if not text:
        return []
    return tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]


def _special_tokens_re(tokenizer) -> re.Pattern[str] | None:
    """Every special token string of ``tokenizer``, longest first."""
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    strings = {t.content for t in decoder.values() if getattr(t, "special", False)}
    strings |= set(getattr(tokenizer, "all_special_tokens", ()))
    strings.discard("")
    if not strings:
        return None
    return re.compile("|".join(re.escape(s) for s in sorted(strings, key=len, reverse=True)))


def _content_spans(tokenizer, messages: list[dict], text: str) -> list[tuple[int, int]] | None:
    """Character spans of the message contents in ``text`` (the rendered prompt), or None
    when the template does not copy contents verbatim."""
    marked = [
        {**m, "content": _MARK.format(i)} if isinstance(m.get("content"), str) else m for i, m in enumerate(messages)
    ]
    skeleton = tokenizer.apply_chat_template(marked, tokenize=False, add_generation_prompt=True)
    parts = _MARK_RE.split(skeleton)  # template, index, template, index, ..., template
    spans, rebuilt, pos = [], [], 0
    for j, part in enumerate(parts):
        if j % 2:
            index = int(part)
            if index >= len(messages):
                return None
            part = messages[index]["content"]
            spans.append((pos, pos + len(part)))
        rebuilt.append(part)
        pos += len(part)
    return spans if "".join(rebuilt) == text else None


def _break_specials(tokenizer, message: dict) -> dict:
    content = message.get("content")
    specials = _special_tokens_re(tokenizer)
    if not isinstance(content, str) or specials is None:
        return message
    return {**message, "content": specials.sub(lambda m: m.group()[0] + _BREAK + m.group()[1:], content)}
