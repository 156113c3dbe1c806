"""Decoding constrained to admissible commands: the trie, the engine, the trainer's masked
recomputation, the data path (Step JSON, packed samples) and the config rules."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from roleagent.engine.constrain import NEG, TokenTrie, TrieCursor, restricted_logprobs, sample_rows
from roleagent.rollout import actor
from roleagent.types import Step

# ------------------------------------------------------------------ the trie ------------


def test_trie_walks_shared_prefixes_and_collapses_duplicates():
    trie = TokenTrie([[5, 6, 7], [5, 8], [9], [5, 8]])
    assert trie.next_tokens([]) == [5, 9]
    assert trie.next_tokens([5]) == [6, 8]
    assert trie.next_tokens([5, 6]) == [7]
    assert trie.next_tokens([5, 8]) == []
    assert [trie.is_complete(p) for p in ([5], [5, 8], [9], [5, 6, 7])] == [False, True, True, True]
    assert (trie.longest, len(trie)) == (3, 3)
    with pytest.raises(KeyError):
        trie.next_tokens([6])


def test_trie_cursor_stops_at_the_first_full_sequence():
    cursor = TrieCursor(TokenTrie([[1, 2], [1, 2, 3], [4]]))
    assert cursor.allowed() == [1, 4]
    assert cursor.advance(1) is False
    assert cursor.allowed() == [2]
    assert cursor.advance(2) is True  # [1, 2] is complete: decoding stops ([1, 2, 3] is shadowed)


def test_trie_rejects_empty_input():
    with pytest.raises(ValueError, match="at least one"):
        TokenTrie([])
    with pytest.raises(ValueError, match="empty"):
        TokenTrie([[1], []])


def test_restricted_logprobs_renormalise_over_the_allowed_set():
    logits = torch.tensor([[0.0, 0.0, math.log(2.0)], [1.0, 2.0, 3.0]])
    every = torch.tensor([[1, 2], [0, 1]])  # (position, target) pairs, one column at a time
    log_p, entropy = restricted_logprobs(
        logits[:, None, :].expand(2, 2, 3), {(0, 0): [1, 2], (0, 1): [1, 2]}, every, with_entropy=True
    )
    assert log_p[0, 0].item() == pytest.approx(math.log(1 / 3), abs=1e-6)
    assert log_p[0, 1].item() == pytest.approx(math.log(2 / 3), abs=1e-6)
    free = torch.log_softmax(logits[1], dim=-1)  # row 1 is free
    assert log_p[1].tolist() == pytest.approx([free[0].item(), free[1].item()], abs=1e-6)
    h = -(1 / 3 * math.log(1 / 3) + 2 / 3 * math.log(2 / 3))
    assert entropy[0].tolist() == pytest.approx([h, h], abs=1e-6)
    assert entropy[1, 0].item() == pytest.approx(float(-(free.exp() * free).sum()), abs=1e-6)
    single, entropy = restricted_logprobs(logits, {(1,): [0]}, torch.tensor([2, 0]), with_entropy=True)
    assert single[1].item() == 0.0 and entropy[1].item() == 0.0  # one allowed token: log-prob exactly 0
    outside, _ = restricted_logprobs(logits, {(0,): [1, 2]}, torch.tensor([0, 0]))
    assert outside[0].item() == NEG  # a target outside its set is marked, not renormalised
    assert torch.equal(restricted_logprobs(logits, {}, torch.tensor([0, 0]))[0], torch.log_softmax(logits, -1)[:, 0])


def test_sample_rows_draws_from_the_renormalised_distribution():
    logits = torch.tensor([[0.0, 0.0, math.log(2.0), 5.0], [1.0, 2.0, 3.0, 0.0]])
    tokens, logprobs = sample_rows(logits, {(0,): [1, 2]}, greedy=True)
    assert tokens.tolist() == [2, 2]
    assert logprobs[0].item() == pytest.approx(math.log(2 / 3), abs=1e-6)
    assert logprobs[1].item() == pytest.approx(float(torch.log_softmax(logits[1], -1)[2]), abs=1e-6)
    generator = torch.Generator().manual_seed(0)
    draws = [sample_rows(logits, {(0,): [1, 2]}, greedy=False, generator=generator) for _ in range(3000)]
    first = torch.stack([t for t, _ in draws])[:, 0]
    assert set(first.tolist()) == {1, 2}  # never a forbidden token
    assert float((first == 2).float().mean()) == pytest.approx(2 / 3, abs=0.03)
    free = torch.stack([t for t, _ in draws])[:, 1]
    expected = torch.softmax(logits[1], -1)
    for token in range(4):
        assert float((free == token).float().mean()) == pytest.approx(float(expected[token]), abs=0.03)
    for t, lp in draws[:20]:  # each log-prob is the drawn token's under the restricted distribution
        assert lp[0].item() == pytest.approx(math.log(1 / 3 if t[0] == 1 else 2 / 3), abs=1e-6)
    nucleus = [sample_rows(logits, {(0,): [1, 2]}, greedy=False, top_p=0.5, generator=generator)[0] for _ in range(200)]
    assert {int(t[0]) for t in nucleus} == {2} and {int(t[1]) for t in nucleus} == {2}  # top-2/3 alone reaches 0.5


# ------------------------------------------------------------------ the engine ----------

WORDS = ["go", "to", "desk", "1", "10", "take", "mug", "from", "open", "drawer", "look", "inventory", "a"]


def _random_commands(rng: random.Random) -> list[str]:
    """Shared prefixes ("go to desk 1" / "go to desk 10"), one-word commands, duplicates."""
    commands = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5))) for _ in range(rng.randint(1, 8))]
    commands += ["go to desk 1", "go to desk 10"] if rng.random() < 0.5 else ["look"]
    if rng.random() < 0.5:
        commands.append(commands[0])
    return commands


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def _prompt(engine, text: str) -> list[int]:
    return engine.encode_chat([{"role": "user", "content": text}], response_prefix=actor.RESPONSE_PREFIX["action"])


def _check_constrained(g, sequences):
    """``g`` emitted one full allowed sequence, each token from the recorded allowed set,
    which is exactly the trie's continuation set at that point."""
    trie = TokenTrie(sequences)
    assert g.ids in [list(s) for s in sequences] and not g.truncated
    assert g.allowed is not None and len(g.allowed) == len(g.ids) == len(g.logprobs)
    for j, (token, allowed) in enumerate(zip(g.ids, g.allowed)):
        assert allowed == trie.next_tokens(g.ids[:j]) and token in allowed
        assert g.logprobs[j] <= 0.0 and (len(allowed) > 1 or g.logprobs[j] == 0.0)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_fuzz_constrained_generations_are_admissible_commands(tiny_policy, temperature):
    from roleagent.engine.hf import HFEngine, SamplingParams

    tok = tiny_policy.tokenizer
    engine = HFEngine(tiny_policy, max_batch=3)
    engine.seed(1)
    rng = random.Random(7 if temperature else 8)
    params = SamplingParams(max_new_tokens=2, temperature=temperature, stop=actor.STOP["action"])
    for _ in range(4):
        lists = [_random_commands(rng) for _ in range(5)]
        allowed = [[_ids(tok, actor.completion(c, "action")) for c in cmds] for cmds in lists]
        allowed[3] = [[int(t)] for t in rng.sample(range(100, 5000), 3)]  # single-token sequences
        allowed[4] = None  # a free row in the same batch
        prompts = [_prompt(engine, f"task {i}: " + " ".join(rng.choice(WORDS) for _ in range(i + 1))) for i in range(5)]
        generations = engine.generate(prompts, params, allowed=allowed)
        assert len(generations) == 5
        for i in (0, 1, 2):
            _check_constrained(generations[i], allowed[i])  # longer than max_new_tokens=2, never cut
            parsed = actor.parse_action(generations[i].text, "action")
            assert parsed.valid and parsed.action in lists[i]
        _check_constrained(generations[3], allowed[3])
        free = generations[4]
        assert free.allowed is None and len(free.ids) <= 2


def test_constrained_greedy_is_the_argmax_among_allowed_tokens(tiny_policy):
    from roleagent.engine.hf import HFEngine, SamplingParams

    engine = HFEngine(tiny_policy)
    prompt = _prompt(engine, "pick one")
    [free] = engine.generate([prompt], SamplingParams(max_new_tokens=1, temperature=0.0))
    top = free.ids[0]
    other = (top + 1) % 1000 + 10
    sequences = [[top, 5], [other]]
    [g] = engine.generate([prompt], SamplingParams(max_new_tokens=1, temperature=0.0), allowed=[sequences])
    assert g.ids == [top, 5] and g.allowed == [sorted([top, other]), [5]]
    assert g.logprobs[0] > math.log(0.5) and g.logprobs[1] == 0.0  # renormalised over {top, other}
    [g] = engine.generate([prompt], SamplingParams(max_new_tokens=1, temperature=0.0), allowed=[[[other]]])
    assert g.ids == [other] and g.logprobs == [0.0]
    with pytest.raises(ValueError, match="entries"):
        engine.generate([prompt, prompt], SamplingParams(), allowed=[None])


def _sequence_logprob(model, prompt: list[int], ids: list[int], sets: list[list[int]]) -> float:
    """Σ_t log π(ids_t | allowed_t) by one unbatched, uncached forward of prompt + ids."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0].float()
    total = 0.0
    for t, (token, allowed) in enumerate(zip(ids, sets)):
        sub = logits[len(prompt) - 1 + t, allowed]
        total += float(sub[allowed.index(token)] - torch.logsumexp(sub, dim=0))
    return total


def test_command_greedy_returns_the_most_likely_sequence(tiny_policy):
    """greedy='command' returns, per constrained row, the sequence whose summed restricted
    log-prob (recomputed here without batching or cache) is the highest; token greedy never
    beats it and, on some of these rows, misses it. Free rows decode as before, chunks of
    max_batch and prefix reuse change nothing."""
    from roleagent.engine.hf import HFEngine, SamplingParams

    tok = tiny_policy.tokenizer
    rng = random.Random(11)
    token_params = SamplingParams(max_new_tokens=3, temperature=0.0, stop=actor.STOP["action"])
    command_params = SamplingParams(max_new_tokens=3, temperature=0.0, stop=actor.STOP["action"], greedy="command")
    engines = [HFEngine(tiny_policy, max_batch=2), HFEngine(tiny_policy, max_batch=8, prefix_cache_tokens=100_000)]
    missed = 0
    for round_ in range(4):
        lists = [_random_commands(rng) + ["go to desk 1", "go to desk 10", "go to drawer 2"] for _ in range(5)]
        allowed = [[_ids(tok, actor.completion(c, "action")) for c in cmds] for cmds in lists]
        allowed[2] = None  # a free row in the batch
        prompts = [_prompt(engines[0], f"round {round_} task {i}: " + rng.choice(WORDS)) for i in range(5)]
        token = engines[0].generate(prompts, token_params, allowed=allowed)
        answers = [engine.generate(prompts, command_params, allowed=allowed) for engine in engines]
        answers.append(engines[1].generate(prompts, command_params, allowed=allowed))  # prompts' KV reused
        assert engines[1].reused_prompt_tokens > 0 or round_ == 0
        for command in answers:
            assert command[2].ids == token[2].ids and command[2].allowed is None
            for i in (0, 1, 3, 4):
                g, trie = command[i], TokenTrie(allowed[i])
                _check_constrained(g, allowed[i])
                scores = {
                    tuple(ids): _sequence_logprob(tiny_policy.model, prompts[i], ids, sets)
                    for ids, sets in trie.paths()
                }
                assert sum(g.logprobs) == pytest.approx(scores[tuple(g.ids)], abs=1e-4)
                assert scores[tuple(g.ids)] >= max(scores.values()) - 1e-4
                assert scores[tuple(token[i].ids)] <= scores[tuple(g.ids)] + 1e-4
                missed += command is answers[0] and token[i].ids != g.ids
    assert missed > 0, "token greedy found the mode on every row: the test shows no difference"
    with pytest.raises(ValueError, match="greedy"):
        engines[0].generate(prompts, SamplingParams(temperature=0.0, greedy="beam"), allowed=allowed)


def test_masked_engine_logprobs_equal_the_trainers_masked_recomputation(tiny_policy):
    from roleagent.engine.hf import HFEngine, SamplingParams
    from roleagent.trainer.samples import TrainSample, allowed_positions, collate, token_logprobs

    tok = tiny_policy.tokenizer
    engine = HFEngine(tiny_policy)
    commands = ["go to desk 1", "go to desk 10", "take mug 1 from desk 1", "look", "open drawer 2"]
    sequences = [_ids(tok, actor.completion(c, "action")) for c in commands]
    prompts = [_prompt(engine, f"episode {i}") for i in range(4)]
    for temperature in (1.0, 0.7):
        engine.seed(3)
        params = SamplingParams(max_new_tokens=8, temperature=temperature)
        generations = engine.generate(prompts, params, allowed=[sequences] * 3 + [None])
        samples = [TrainSample(g.prompt_ids, g.ids, g.logprobs, 1.0, allowed=g.allowed) for g in generations]
        *tensors, keep = collate(samples, tok.pad_token_id, torch.device("cpu"))
        input_ids, attention, positions, targets, old, mask, _ = tensors
        allowed = allowed_positions(samples, keep)
        assert len(allowed) == sum(len(g.ids) for g in generations[:3])
        with torch.no_grad():
            masked, entropy = token_logprobs(
                tiny_policy.model, input_ids, attention, positions, targets, keep,
                temperature=temperature, allowed=allowed, with_entropy=True,
            )  # fmt: skip
            plain, _ = token_logprobs(
                tiny_policy.model, input_ids, attention, positions, targets, keep, temperature=temperature
            )
        assert torch.all(entropy.isfinite())
        assert float(((masked - old).abs() * mask).max()) < 1e-4
        assert float(((plain - old).abs() * mask).max()) > 1e-2  # the mask is what makes them equal
        for (row, col), ids in allowed.items():
            if len(ids) == 1:
                assert masked[row, col].item() == 0.0 and entropy[row, col].item() == pytest.approx(0.0, abs=1e-6)


def test_masked_entropy_and_gradient_are_finite_and_zero_on_single_choices(tiny_policy):
    from roleagent.trainer.samples import TrainSample, allowed_positions, collate, token_logprobs

    tok = tiny_policy.tokenizer
    sample = TrainSample([1, 2, 3], [7, 8, 9], [0.0] * 3, 1.0, allowed=[[7, 11], [8], None])
    *tensors, keep = collate([sample], tok.pad_token_id, torch.device("cpu"))
    input_ids, attention, positions, targets, *_ = tensors
    model = tiny_policy.model
    model.zero_grad(set_to_none=True)
    logprobs, entropy = token_logprobs(
        model,
        input_ids,
        attention,
        positions,
        targets,
        keep,
        allowed=allowed_positions([sample], keep),
        with_entropy=True,
    )
    assert logprobs[0, 1].item() == 0.0
    (logprobs[0, 1] + entropy[0, 1]).backward(retain_graph=True)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert all(float(g.abs().max()) == 0.0 for g in grads)  # a forced token teaches nothing
    model.zero_grad(set_to_none=True)
    (logprobs[0, 0] + entropy[0, 0]).backward()
    assert all(torch.all(p.grad.isfinite()) for p in model.parameters() if p.grad is not None)
    assert any(float(p.grad.abs().max()) > 0 for p in model.parameters() if p.grad is not None)
    model.zero_grad(set_to_none=True)


def test_prefix_cache_on_or_off_gives_the_same_constrained_generations(tiny_policy):
    from roleagent.engine.hf import HFEngine, SamplingParams

    tok = tiny_policy.tokenizer
    cached, plain = HFEngine(tiny_policy, prefix_cache_tokens=100_000), HFEngine(tiny_policy)
    sequences = [_ids(tok, actor.completion(c, "action")) for c in ("go to desk 1", "go to desk 10", "look")]
    first = [_prompt(cached, f"room {i} has a desk and a drawer") for i in range(3)]
    for temperature in (0.0, 1.0):
        params = SamplingParams(max_new_tokens=4, temperature=temperature)
        prompts = first
        for _turn in range(2):  # the second turn extends the first: its prefix is reused
            cached.seed(5)
            plain.seed(5)
            a = cached.generate(prompts, params, allowed=[sequences] * 3)
            b = plain.generate(prompts, params, allowed=[sequences] * 3)
            assert [g.ids for g in a] == [g.ids for g in b] and [g.allowed for g in a] == [g.allowed for g in b]
            assert max(abs(x - y) for ga, gb in zip(a, b) for x, y in zip(ga.logprobs, gb.logprobs)) < 1e-4
            prompts = [
                cached.extend_chat(
                    g.prompt_ids, g.ids, [{"role": "user", "content": "next"}], response_prefix="<action>"
                )
                for g in a
            ]
    assert cached.reused_prompt_tokens > 0


# ------------------------------------------------------------- data path -----------------


def test_step_json_round_trip_keeps_the_allowed_sets():
    step = Step("obs", "k", "look</action>", "look", True, [1, 2], [3, 4], [-0.5, 0.0], action_allowed=[[3, 9], [4]])
    back = Step.from_json(step.to_json(tokens=True))
    assert back.action_allowed == [[3, 9], [4]] and back.action_ids == [3, 4]
    assert "action_allowed" not in step.to_json()  # token data only with tokens=True
    free = Step("obs", "k", "x", "x", True, [1], [2], [-1.0])
    assert Step.from_json(free.to_json(tokens=True)).action_allowed is None


def _batch(steps):
    from roleagent.trainer.advantages import StepBatch
    from roleagent.types import Task, Trajectory

    return StepBatch.from_trajectories([Trajectory(Task("t/0", "scripted"), steps=list(steps))])


def test_training_samples_carry_the_masks_packed_and_unpacked():
    from roleagent.trainer.samples import allowed_positions
    from roleagent.trainer.stages import training_samples

    s1 = Step("o1", "a", "t", "t", True, [1], [2, 3], [-0.7, 0.0], action_allowed=[[2, 5], [3]])
    s2 = Step("o2", "b", "t", "t", True, [1, 2, 3, 4], [6], [-0.2], action_allowed=[[6, 7, 8]])
    batch = _batch([s1, s2])
    advantages = np.array([0.5, -1.0])
    [packed] = training_samples(batch, advantages, pack=True)
    assert packed.output_ids == [2, 3, 4, 6] and packed.action_mask == [1, 1, 0, 1]
    assert packed.allowed == [[2, 5], [3], None, [6, 7, 8]]
    assert allowed_positions([packed], keep=5) == {(0, 1): [2, 5], (0, 2): [3], (0, 4): [6, 7, 8]}
    unpacked = training_samples(batch, advantages, pack=False)
    assert [s.allowed for s in unpacked] == [[[2, 5], [3]], [[6, 7, 8]]]
    free = Step("o", "c", "t", "t", True, [1], [2], [-1.0])
    assert training_samples(_batch([free]), np.array([1.0]))[0].allowed is None


# ------------------------------------------------------------------ config ----------------


def test_constrain_actions_config_rules():
    from roleagent.config import ConfigError, TrainConfig, validate

    cfg = TrainConfig()
    cfg.env.name = "scripted"
    cfg.rollout.constrain_actions = True
    cfg.rollout.action_format = "raw"
    with pytest.raises(ConfigError, match="rollout.action_format=action or think_action, not 'raw'"):
        validate(cfg)
    for fmt in ("think_action", "action"):
        cfg.rollout.action_format = fmt
        validate(cfg)
    cfg.rollout.project_actions = True
    with pytest.raises(ConfigError, match="rollout.constrain_actions and rollout.project_actions"):
        validate(cfg)
    cfg.rollout.project_actions, cfg.eval.greedy = False, "command"
    validate(cfg)
    cfg.rollout.constrain_actions = False
    with pytest.raises(ConfigError, match="eval.greedy=command .* needs rollout.constrain_actions=true"):
        validate(cfg)
    cfg.eval.greedy = "beam"
    with pytest.raises(ConfigError, match="eval.greedy"):
        validate(cfg)


def test_top_p_applies_within_the_allowed_set(tiny_policy):
    """With a vanishing top_p only the most likely ALLOWED token survives, so sampling
    equals constrained greedy decoding (had the nucleus been taken over the whole
    vocabulary first, it would hold no allowed token at all)."""
    from roleagent.engine.hf import HFEngine, SamplingParams

    tok = tiny_policy.tokenizer
    engine = HFEngine(tiny_policy)
    sequences = [
        _ids(tok, actor.completion(c, "action")) for c in ("go to desk 1", "take mug 1", "look", "open drawer")
    ]
    prompts = [_prompt(engine, f"state {i}") for i in range(3)]
    greedy = engine.generate(prompts, SamplingParams(temperature=0.0), allowed=[sequences] * 3)
    for seed in range(3):
        engine.seed(seed)
        nucleus = engine.generate(prompts, SamplingParams(temperature=1.0, top_p=1e-6), allowed=[sequences] * 3)
        assert [g.ids for g in nucleus] == [g.ids for g in greedy]


def test_forced_tails_skip_the_forwards_and_change_nothing_else(tiny_policy, monkeypatch):
    """Once one allowed sequence remains, the engine appends its tokens (log-prob 0, each
    its own allowed set) without running the model: greedy generations, log-probs and
    allowed sets equal token-by-token decoding's, with fewer forwards."""
    from roleagent.engine.hf import HFEngine, SamplingParams

    tok = tiny_policy.tokenizer
    engine = HFEngine(tiny_policy, prefix_cache_tokens=4096)
    commands = ["go to desk 1", "go to desk 10", "take mug 1 from desk 1", "look", "open drawer 2"]
    sequences = [_ids(tok, actor.completion(c, "action")) for c in commands]
    prompts = [_prompt(engine, f"episode {i}") for i in range(4)]
    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    forwards = []
    hook = tiny_policy.model.register_forward_hook(lambda *_: forwards.append(1))
    try:
        fast = engine.generate(prompts, params, allowed=[sequences] * 4)
        fast_forwards = len(forwards)
        # the stored KV covers the prompt and the sampled tokens fed, not the appended tail
        entry, length = engine.prefix_cache.lookup(prompts[0] + fast[0].ids)
        assert entry is not None and len(prompts[0]) <= length <= len(prompts[0]) + len(fast[0].ids) - 2
        engine.clear_prefix_cache()
        monkeypatch.setattr(TrieCursor, "forced_tail", lambda self: None)
        slow = engine.generate(prompts, params, allowed=[sequences] * 4)
    finally:
        hook.remove()
    for f, s in zip(fast, slow):
        _check_constrained(f, sequences)
        assert (f.ids, f.logprobs, f.allowed, f.truncated) == (s.ids, s.logprobs, s.allowed, s.truncated)
    assert fast_forwards < len(forwards) - fast_forwards


def test_head_logits_compute_only_the_rows_asked_for():
    from roleagent.engine.constrain import HeadLogits

    head = HeadLogits(torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), None, 2.0)
    index = (torch.tensor([0]),)
    assert head.rows(index).tolist() == [[0.5, 1.0, 1.5]]  # the docstring's example
    assert head.at(index, torch.tensor([[2]])).tolist() == [[1.5]]  # A·H = 2 ≤ V = 3: gathered rows of W
    assert head.at(index, torch.tensor([[2, 0]])).tolist() == [[1.5, 0.5]]  # A·H = 4 > V: from whole rows
    dense = torch.tensor([[0.5, 1.0, 1.5]])
    for allowed in ({}, {(0,): [0, 2]}, {(0,): [1]}):
        lazy, e_lazy = restricted_logprobs(head, allowed, torch.tensor([0]), with_entropy=True)
        full, e_full = restricted_logprobs(dense, allowed, torch.tensor([0]), with_entropy=True)
        assert torch.allclose(lazy, full) and torch.allclose(e_lazy, e_full)


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_the_update_head_on_allowed_rows_equals_the_models_forward(lora_rank, monkeypatch):
    """``token_logprobs`` runs the LM head on the allowed rows only (``output_head``); its
    log-probs, entropies and gradients are the model forward's, full weights or LoRA."""
    import roleagent.trainer.samples as samples_module
    from roleagent.models.loading import load_policy

    policy = load_policy("tiny", device="cpu", dtype="float32", lora_rank=lora_rank)
    assert samples_module.output_head(policy.model) is not None
    rng = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, policy.tokenizer.vocab_size, (3, 20), generator=gen)
    attention = torch.ones_like(input_ids)
    attention[0, :4] = 0  # a left-padded row
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    allowed = {(r, c): rng.sample(range(1000), rng.choice([1, 3, 20])) for r in range(3) for c in range(5) if c != 2}
    targets = input_ids[:, -5:].clone()
    for (r, c), ids in allowed.items():
        targets[r, c] = ids[0]
    targets[1, 3] = 1001  # outside its set: NEG either way

    def run():
        policy.model.zero_grad(set_to_none=True)
        logprobs, entropy = samples_module.token_logprobs(
            policy.model,
            input_ids,
            attention,
            positions,
            targets,
            5,
            temperature=0.7,
            allowed=allowed,
            with_entropy=True,
        )
        (logprobs.clamp(min=-1e3).sum() + entropy.sum()).backward()
        return (
            logprobs.detach(),
            entropy.detach(),
            [p.grad.clone() for p in policy.model.parameters() if p.grad is not None],
        )

    lazy = run()
    monkeypatch.setattr(samples_module, "output_head", lambda model: None)  # the model's own forward
    dense = run()
    assert lazy[0][1, 3].item() == NEG and dense[0][1, 3].item() == NEG
    assert torch.allclose(lazy[0], dense[0], atol=1e-5) and torch.allclose(lazy[1], dense[1], atol=1e-5)
    assert len(lazy[2]) == len(dense[2]) > 0
    # fp32 rounding of a gradient grows with its size (entries up to ~6 here): tolerance relative to it
    assert all(torch.allclose(a, b, atol=1e-5 * max(1.0, float(b.abs().max()))) for a, b in zip(lazy[2], dense[2]))


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_where_computes_the_masked_positions_only_and_changes_none_of_them(lora_rank, monkeypatch):
    """``token_logprobs(where=mask)``, as the SFT loss calls it: log-probs and gradients of
    ``Σ log π · mask`` equal the model forward's without ``where``; the positions outside
    it are 0; the LM head computes rows at the masked positions only."""
    import roleagent.trainer.samples as samples_module
    from roleagent.engine.constrain import HeadLogits
    from roleagent.models.loading import load_policy

    policy = load_policy("tiny", device="cpu", dtype="float32", lora_rank=lora_rank)
    gen = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, policy.tokenizer.vocab_size, (2, 16), generator=gen)
    attention = torch.ones_like(input_ids)
    attention[1, :3] = 0
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    targets = input_ids[:, -8:].clone()
    mask = torch.zeros(2, 8)
    mask[0, [1, 2, 6]] = 1
    mask[1, [0, 7]] = 1
    allowed = {(0, 2): [5, int(targets[0, 2]), 9], (1, 3): [4, 8]}  # (1, 3) is outside the mask
    rows_computed = []
    real_rows = HeadLogits.rows
    monkeypatch.setattr(
        HeadLogits, "rows", lambda self, index: rows_computed.append(len(index[0])) or real_rows(self, index)
    )

    def run(where):
        policy.model.zero_grad(set_to_none=True)
        logprobs, _ = samples_module.token_logprobs(
            policy.model, input_ids, attention, positions, targets, 8, allowed=allowed, where=where
        )
        (logprobs * mask).sum().backward()
        return logprobs.detach(), [p.grad.clone() for p in policy.model.parameters() if p.grad is not None]

    masked = run(mask > 0)
    assert rows_computed == [4]  # the 5 masked positions, less the constrained one
    whole = run(None)
    assert rows_computed[-1] == 14  # 16 positions, less the 2 constrained ones
    assert (masked[0][mask == 0] == 0).all()
    assert torch.allclose(masked[0][mask > 0], whole[0][mask > 0], atol=1e-5)
    assert len(masked[1]) == len(whole[1]) > 0
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(masked[1], whole[1]))
    nothing = run(torch.zeros_like(mask, dtype=torch.bool))  # a micro-batch with no loss token still back-propagates
    assert (nothing[0] == 0).all() and all((g == 0).all() for g in nothing[1])
    monkeypatch.setattr(samples_module, "output_head", lambda model: None)  # dense logits, same values
    dense = run(mask > 0)
    assert torch.equal(dense[0] == 0, masked[0] == 0)
    assert torch.allclose(dense[0], masked[0], atol=1e-5)


def test_output_head_declines_what_it_cannot_split(tiny_policy):
    from roleagent.trainer.samples import output_head

    class Wrapper(torch.nn.Module):  # a data-parallel wrapper has no config
        def __init__(self, module):
            super().__init__()
            self.module = module

    assert output_head(Wrapper(tiny_policy.model)) is None
    other = type("Config", (), {"model_type": "gemma2"})()  # soft-capped logits
    model = type("Model", (), {"config": other, "get_decoder": None, "get_output_embeddings": None})()
    assert output_head(model) is None


def test_constrained_think_action_turns_are_action_blocks(tmp_path):
    """``think_action`` with constrained decoding: every turn is ``<action>c</action>`` with c
    admissible (no thought), parsed as valid, so methods that need ReAct turns in their
    data (Agent-R's revision thoughts) can train a policy that acts through the commands."""
    import json

    from roleagent.config import load_config
    from roleagent.trainer import Trainer

    sets = ["rollout.action_format=think_action", "iterations=1", "eval.sampled=0", f"run_dir={tmp_path}"]
    trainer = Trainer(load_config("signpost_probe", sets), resume=False, quiet=True)
    try:
        trainer.run()
    finally:
        trainer.close()
    steps = [
        step
        for path in (tmp_path / "rollouts").glob("*.jsonl")
        for line in path.read_text().splitlines()
        for step in json.loads(line)["steps"]
    ]
    assert steps
    for step in steps:
        assert step["action_text"] == f"<action>{step['action']}</action>", step["action_text"]
        assert actor.parse_action(step["action_text"], "think_action").valid
