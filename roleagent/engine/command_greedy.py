"""Whole-command greedy decoding: the most likely allowed sequence, not the token-by-token argmax.

A constrained row (:mod:`roleagent.engine.constrain`) is a distribution over its allowed
sequences (commands)::

    π(s) = Π_t π(s_t | s_<t, A_t),   π(a | ·, A_t) = softmax over A_t of the logits,

where A_t is the set of tokens that continue some sequence after s_<t. Greedy decoding
(``SamplingParams(temperature=0)``) takes argmax_{a ∈ A_t} at each position, which need
not be the mode argmax_s π(s). Example: π(a) = 0.6, π(b) = 0.4 at the first position; two
sequences continue a (a·x, a·y, 0.5 each), b is complete. Token greedy returns a·x,
π = 0.3; the mode is b, π = 0.4. With ``SamplingParams(greedy="command")`` the engine
returns the mode, scored at T = 1 like greedy's reported log-probs.

Only the trie's branching nodes (|A_t| > 1) need a distribution; a forced token has
log-prob 0. The roots' come from one prefill of the prompts; the deeper ones from one
forward over the fewest token paths that pass through all of them (a path per deepest
branching prefix: "go to desk 1" and "go to desk 10" share one path through "go to
desk"), at most ``max_batch`` paths at a time, each over a copy of its prompt's KV. Cost:
one prefill plus a forward of Σ(path lengths) tokens, against token greedy's prefill plus
one forward per branching depth. The prompts' KVs go to the engine's prefix store; the
paths' do not.
"""

from __future__ import annotations

import torch

from roleagent.engine.base import Generation
from roleagent.engine.constrain import TokenTrie
from roleagent.engine.prefix_cache import plain_dynamic

__all__ = ["best_sequences"]


def best_sequences(engine, prompts: list[list[int]], tries: list[TokenTrie]) -> list[Generation]:
    """Each prompt's allowed sequence of highest Σ_t log π(s_t | s_<t, A_t) (module
    docstring), with its per-token log-probs and allowed sets, as a :class:`Generation`;
    ties keep the first sequence in token order. ``engine`` is an
    :class:`~roleagent.engine.hf.HFEngine`; ``len(prompts) <= engine.max_batch``."""
    model = engine.policy.model
    was_training = model.training
    model.eval()
    step_input, attention, positions, reuse = engine._prefill_inputs(prompts)
    last, cache, _, _ = engine._prefill(step_input, attention, positions, reuse, 0)  # (n, V)
    if not plain_dynamic(cache):
        raise ValueError("greedy='command' needs a model with a plain DynamicCache (full-attention layers)")
    n = len(prompts)
    engine._store_rows(cache, attention, [(r, r) for r in range(n)], prompts, [[]] * n, [0] * n)
    paths = [(row, ids, sets) for row, trie in enumerate(tries) for ids, sets in trie.paths()]
    nodes: dict[tuple[int, tuple[int, ...]], dict[int, float]] = {}  # (row, prefix) -> {token: log π}
    for row, trie in enumerate(tries):
        if len(allowed := trie.next_tokens([])) > 1:
            nodes[(row, ())] = _restricted(last[row].float(), allowed)
    deep = {(row, tuple(ids[:t])) for row, ids, sets in paths for t in range(1, len(ids)) if len(sets[t]) > 1}
    feeds = sorted(deep)  # a prefix sorts right before the prefixes that extend it
    feeds = [f for f, g in zip(feeds, [*feeds[1:], None]) if g is None or g[0] != f[0] or g[1][: len(f[1])] != f[1]]
    for start in range(0, len(feeds), engine.max_batch):
        chunk = feeds[start : start + engine.max_batch]
        logits = _path_logits(engine, cache, attention, positions, chunk)  # (m, width, V)
        for j, (row, prefix) in enumerate(chunk):
            for t in range(1, len(prefix) + 1):
                if (row, prefix[:t]) in deep and (row, prefix[:t]) not in nodes:
                    nodes[(row, prefix[:t])] = _restricted(logits[j, t - 1], tries[row].next_tokens(prefix[:t]))
    best: dict[int, tuple[list[int], list[list[int]], list[float]]] = {}
    for row, ids, sets in paths:
        logprobs = [nodes[(row, tuple(ids[:t]))][token] if len(sets[t]) > 1 else 0.0 for t, token in enumerate(ids)]
        if row not in best or sum(logprobs) > sum(best[row][2]):
            best[row] = (ids, sets, logprobs)
    model.train(was_training)
    results = []
    for row, prompt in enumerate(prompts):
        ids, sets, logprobs = best[row]
        engine.generated_tokens += len(ids)
        text = engine.tokenizer.decode(ids, skip_special_tokens=True)
        results.append(Generation(list(prompt), list(ids), logprobs, text, False, allowed=sets))
    return results


def _path_logits(engine, cache, attention: torch.Tensor, positions: torch.Tensor, paths) -> torch.Tensor:
    """Logits (m, width, V) after each token of each ``(row, tokens)`` path, from one
    forward over a copy of its prompt's KV row: position k predicts token k + 1."""
    from transformers import DynamicCache

    device = engine.policy.device
    rows = torch.tensor([row for row, _ in paths], device=device)
    width = max(len(tokens) for _, tokens in paths)
    ids = torch.full((len(paths), width), engine.tokenizer.pad_token_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(paths), width), dtype=attention.dtype, device=device)
    for j, (_, tokens) in enumerate(paths):
        ids[j, : len(tokens)] = torch.tensor(tokens, device=device)
        mask[j, : len(tokens)] = 1  # right padding: a real token never attends to a pad after it
    kv = DynamicCache([(layer.keys[rows], layer.values[rows]) for layer in cache.layers])
    attention = torch.cat([attention[rows], mask], dim=1)
    positions = positions[rows, -1:] + 1 + torch.arange(width, device=device)
    return engine._forward(ids, attention, positions, kv, every_position=True).logits.float()


def _restricted(logits: torch.Tensor, allowed: list[int]) -> dict[int, float]:
    """{token: log π(token)} over ``allowed``, π the softmax of ``logits`` (V,) renormalised
    over them: ``_restricted(torch.tensor([0., 0., 0.6931]), [1, 2])`` → {1: ln 1/3, 2: ln 2/3}."""
    sub = logits[torch.tensor(allowed, device=logits.device)]
    return dict(zip(allowed, torch.log_softmax(sub, dim=0).tolist()))
