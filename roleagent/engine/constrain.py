"""Decoding constrained to a set of token sequences: a policy over admissible commands.

GLAM (Carta et al., 2023, arXiv:2302.02662) makes the LLM a distribution over the
environment's admissible actions, so every action is executable and the gradient goes to
the command that was executed. Here the same is obtained by constrained decoding: a row's
allowed sequences (the token ids of each admissible command's completion) form a prefix
tree; at each step the row may only emit a token that continues some sequence, and it
finishes exactly when a full sequence has been emitted. The sampling distribution is the
model's renormalised over the allowed tokens (:func:`restricted_logprobs`, :func:`sample_rows`), so a position with
one allowed token has log-prob exactly 0, and π(command) = Π_t π(token_t | allowed_t)
sums to 1 over the commands (GLAM scores each command by the same product, without the
per-position renormalisation).

The allowed set of each generated position is returned with the generation; the trainer
applies the same restriction when it recomputes log-probs, so the PPO ratio compares the
restricted policy with itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from roleagent.algos.loss import token_entropy_from_logits

__all__ = ["NEG", "HeadLogits", "TokenTrie", "restricted_logprobs", "sample_rows"]

#: The log-prob of a target outside its allowed set: finite (float32 min), so the
#: non-finite diagnosis (``roleagent.trainer.nonfinite``) can find it.
NEG = torch.finfo(torch.float32).min

_END = -1  # key marking the end of a full sequence in a trie node


class TokenTrie:
    """Prefix tree over token sequences (duplicates collapse).

    A decoder walks it token by token: :meth:`next_tokens` are the tokens that continue some
    sequence after ``prefix``, and :meth:`is_complete` says a full sequence was emitted
    (decoding then stops, so a sequence that extends another full one is never reached;
    completions that end with a closing tag never are prefixes of each other).

    >>> trie = TokenTrie([[5, 6, 7], [5, 8], [9], [5, 8]])
    >>> trie.next_tokens([]), trie.next_tokens([5]), trie.next_tokens([5, 6])
    ([5, 9], [6, 8], [7])
    >>> trie.is_complete([5, 8]), trie.is_complete([5]), trie.is_complete([9])
    (True, False, True)
    >>> trie.longest, len(trie)
    (3, 3)
    """

    def __init__(self, sequences: Sequence[Sequence[int]]):
        if not sequences:
            raise ValueError("a constrained row needs at least one allowed token sequence")
        self.root: dict[int, dict] = {}
        self.longest = 0
        self._count = 0
        for sequence in sequences:
            if not sequence:
                raise ValueError("an allowed token sequence is empty")
            node = self.root
            for token in sequence:
                node = node.setdefault(int(token), {})
            if _END not in node:
                node[_END] = {}
                self._count += 1
            self.longest = max(self.longest, len(sequence))

    def __len__(self) -> int:
        """The number of distinct sequences."""
        return self._count

    def node(self, prefix: Sequence[int]) -> dict[int, dict]:
        """The node reached by ``prefix``; KeyError when no sequence starts with it."""
        node = self.root
        for token in prefix:
            node = node[int(token)]
        return node

    def next_tokens(self, prefix: Sequence[int]) -> list[int]:
        """Sorted tokens that continue some sequence after ``prefix``."""
        return _children(self.node(prefix))

    def is_complete(self, prefix: Sequence[int]) -> bool:
        return _END in self.node(prefix)

    def paths(self) -> list[tuple[list[int], list[list[int]]]]:
        """Every sequence a decoder can emit, with the allowed tokens at each of its
        positions, in sorted token order. A sequence that extends a complete one is not
        listed: decoding stops at the shorter.

        >>> TokenTrie([[5, 6, 7], [5, 8], [9], [5, 8, 1]]).paths()
        [([5, 6, 7], [[5, 9], [6, 8], [7]]), ([5, 8], [[5, 9], [6, 8]]), ([9], [[5, 9]])]
        """
        out: list[tuple[list[int], list[list[int]]]] = []
        stack: list[tuple[dict, list[int], list[list[int]]]] = [(self.root, [], [])]
        while stack:
            node, prefix, sets = stack.pop()
            if _END in node and prefix:
                out.append((prefix, sets))
                continue
            children = _children(node)
            stack.extend((node[t], [*prefix, t], [*sets, children]) for t in reversed(children))
        return out


class TrieCursor:
    """One decoding row's position in its trie (advanced one token at a time)."""

    def __init__(self, trie: TokenTrie):
        self.trie, self._node = trie, trie.root

    def allowed(self) -> list[int]:
        return _children(self._node)

    def advance(self, token: int) -> bool:
        """Move past ``token`` (which must be allowed); True when a full sequence is done."""
        self._node = self._node[int(token)]
        return _END in self._node

    def advance_all(self, tokens: Sequence[int]) -> bool:
        """:meth:`advance` past each of ``tokens``; True when a full sequence is done."""
        done = False
        for token in tokens:
            done = self.advance(token)
        return done

    def forced_tail(self) -> list[int] | None:
        """The rest of the row's sequence when only one remains below the cursor (each
        token of it the single allowed one, so its log-prob is exactly 0), else None. The
        engine appends it without running the model: those forwards could not change a
        token, a log-prob or the trainer's gradient (zero at a one-token position).

        >>> cursor = TrieCursor(TokenTrie([[5, 6, 7], [5, 8, 9], [4]]))
        >>> cursor.forced_tail(), cursor.advance(5), cursor.forced_tail()
        (None, False, None)
        >>> cursor.advance(8), cursor.forced_tail()
        (False, [9])
        """
        tail, node = [], self._node
        while _END not in node:
            if len(node) != 1:
                return None
            token = next(iter(node))
            tail.append(token)
            node = node[token]
        return tail or None


def _children(node: dict[int, dict]) -> list[int]:
    return sorted(t for t in node if t != _END)


class HeadLogits:
    """Logits computed only where they are asked for: ``z = (h Wᵀ + b) / T`` from the final
    hidden states ``h`` (..., H) and the output layer (``weight`` (V, H), ``bias`` (V,) or
    None), in float32 like the dense path's ``logits.float() / T``.

    A constrained position needs the logits of its allowed tokens only (a few of a 49k
    vocabulary), so :func:`restricted_logprobs` given one of these computes ``h · W[ids]``
    there and the whole row only at free positions. The LM head is then no longer the
    update's largest matmul (the tiny test model: 64 hidden units against 49,152 rows).
    The values are the dense logits' up to float rounding (another summation order).

    Example: h = [[1, 2]], W = [[1, 0], [0, 1], [1, 1]], T = 2: ``rows`` → [[0.5, 1, 1.5]],
    ``at`` of ids [[2, 0]] → [[1.5, 0.5]].
    """

    def __init__(self, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float = 1.0):
        self.hidden, self.weight, self.bias = hidden, weight, bias
        self.scale = 1.0 / temperature if temperature > 0 else 1.0
        self.shape = (*hidden.shape[:-1], weight.shape[0])
        self.device = hidden.device

    def _scaled(self, z: torch.Tensor) -> torch.Tensor:
        z = z.float()
        return z * self.scale if self.scale != 1.0 else z

    def rows(self, index: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The whole vocabulary's logits at the positions ``index`` (one (n,) tensor per
        leading axis): (n, V)."""
        return self._scaled(torch.nn.functional.linear(self.hidden[index], self.weight, self.bias))

    def at(self, index: tuple[torch.Tensor, ...], ids: torch.Tensor) -> torch.Tensor:
        """The logits of token ``ids`` (n, A) at the positions ``index``: (n, A). The rows
        of W it gathers take n·A·H numbers; when that exceeds the n·V of whole rows (sets
        wider than V / H tokens), it computes the whole rows and reads the ids from them."""
        if ids.shape[-1] * self.hidden.shape[-1] > self.weight.shape[0]:
            return self.rows(index).gather(-1, ids)
        z = torch.einsum("nh,nah->na", self.hidden[index], self.weight[ids])
        return self._scaled(z if self.bias is None else z + self.bias[ids])


def _rows(logits, index) -> torch.Tensor:
    """Whole rows at ``index``, of a dense (..., V) tensor or a :class:`HeadLogits`: (n, V)."""
    return logits.rows(index) if isinstance(logits, HeadLogits) else logits[index]


def _at(logits, index, ids: torch.Tensor) -> torch.Tensor:
    """The logits of ``ids`` (n, A) at ``index``, of either kind: (n, A)."""
    if isinstance(logits, HeadLogits):
        return logits.at(index, ids)
    return logits[tuple(axis[:, None] for axis in index) + (ids,)]


def _gather_allowed(logits, allowed: Mapping[tuple[int, ...], Sequence[int]]):
    """The constrained positions' logits, packed: ``(positions, ids, sub, real)`` where
    ``positions`` is one index tensor per leading axis (P,), ``ids`` (P, A) the allowed
    token ids padded with each position's first id, and ``sub`` (P, A) their logits with
    −inf in the padding, so ``logsumexp(sub)`` is the normaliser over the allowed set, and
    ``real`` (P, A) marks the entries that are not padding. ``logits``: a tensor (..., V)
    or :class:`HeadLogits`."""
    device = logits.device
    width = max(len(ids) for ids in allowed.values())
    positions = tuple(torch.tensor(axis, device=device) for axis in zip(*allowed))  # one (P,) per axis
    ids = torch.tensor([[*v, *[v[0]] * (width - len(v))] for v in allowed.values()], device=device)  # (P, A)
    real = (
        torch.arange(width, device=device)[None, :]
        < torch.tensor([len(v) for v in allowed.values()], device=device)[:, None]
    )
    return positions, ids, _at(logits, positions, ids).masked_fill(~real, float("-inf")), real  # (P, A)


def restricted_logprobs(
    logits,
    allowed: Mapping[tuple[int, ...], Sequence[int]],
    targets: torch.Tensor,
    *,
    with_entropy: bool = False,
    where: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log π(target)`` at every position of ``logits`` (..., V) (``targets`` (...)) and,
    optionally, the entropy of π there: π is the softmax over the whole vocabulary, or, at
    a position in ``allowed`` (the index of a position over the leading axes → its token
    ids), the softmax renormalised over its allowed tokens, ``log π(t) = z_t − log Σ_{a ∈
    allowed} e^{z_a}``. Apply it to temperature-scaled logits: the restricted distribution
    is then ``softmax(z / T)`` over the set. A target outside its position's set (a
    retokenisation mismatch) gets :data:`NEG` and no gradient. ``logits`` may be a
    :class:`HeadLogits`, which computes only the logits these sums read. ``where`` (...),
    boolean, names the positions whose values are used (an SFT loss mask); the others get
    log-prob 0 and entropy 0 and cost nothing, so a :class:`HeadLogits` never computes
    their rows (the observations of a packed chat are most of its positions).

    Only the allowed logits enter a constrained position's sums: masking the other V − k
    with a huge negative number and taking a softmax over V is the same maths, but its
    ``exp`` of numbers below −88 falls on the CPU's slow underflow path, which made that
    softmax cost more than the small model's forward.

    Example: logits [[0, 0, ln 2]] with {(0,): [1, 2]}: log π(1) = ln 1/3, log π(2) = ln 2/3,
    entropy 0.6365; with {(0,): [2]}: log π(2) = 0 exactly, entropy 0; target 0 → NEG; with
    ``where`` [False]: 0 whatever the target.
    """
    if where is None:
        free = torch.ones(logits.shape[:-1], dtype=torch.bool, device=logits.device)  # (...)
    else:
        free = where.to(device=logits.device, dtype=torch.bool).clone()  # (...)
        if allowed:  # constrained positions outside ``where`` are skipped too
            used = free.cpu()
            allowed = {p: ids for p, ids in allowed.items() if used[p]}
    if allowed:
        positions, ids, sub, real = _gather_allowed(logits, allowed)  # (P, A)
        free[positions] = False
    free_positions = free.nonzero(as_tuple=True)  # the whole vocabulary's sums only where needed
    rows = _rows(logits, free_positions)  # (F, V)
    picked = rows.gather(-1, targets[free_positions][:, None]).squeeze(-1) - torch.logsumexp(rows, dim=-1)  # (F,)
    logprobs = rows.new_zeros(free.shape).index_put(free_positions, picked)
    entropy = None
    if with_entropy:
        entropy = rows.new_zeros(free.shape).index_put(free_positions, token_entropy_from_logits(rows))
    if allowed:
        log_p = sub - torch.logsumexp(sub, dim=-1)[:, None]  # (P, A), −inf in the padding
        hit = (ids == targets[positions][:, None]) & real  # (P, A): the target's column, if any
        in_set = hit.any(dim=-1)  # (P,)
        chosen = log_p.gather(-1, hit.int().argmax(dim=-1)[:, None]).squeeze(-1)  # column 0 (real) when none
        logprobs = logprobs.index_put(positions, torch.where(in_set, chosen, NEG))
        if entropy is not None:  # 0 in the padding (not −inf, whose 0 · ∞ would give NaN gradients)
            log_p = log_p.masked_fill(~real, 0.0)
            entropy = entropy.index_put(positions, -(log_p.exp() * log_p * real).sum(dim=-1))
    return logprobs, entropy


def sample_rows(
    logits: torch.Tensor,
    allowed: Mapping[tuple[int], Sequence[int]],
    *,
    greedy: bool,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row of ``logits`` (b, V), already temperature-scaled, and its log-prob:
    a row in ``allowed`` draws from its allowed tokens only (renormalised; greedy: their
    argmax), the others from the whole vocabulary; ``top_p`` keeps the smallest set of most
    likely tokens whose mass reaches it (the log-prob stays the one before the cut).

    Each row draws by inverse CDF from one uniform number (the rows' numbers come from
    ``generator`` in row order), over its k allowed tokens rather than all V.

    Example: logits [[0, 0, ln 2]], {(0,): [1, 2]}, greedy → token 2, log-prob ln 2/3; a
    uniform u < 1/3 draws token 1, u ≥ 1/3 token 2.
    """
    b = logits.shape[0]
    device = logits.device
    tokens = torch.empty(b, dtype=torch.long, device=device)
    logprobs = torch.empty(b, dtype=logits.dtype, device=device)
    uniform = None if greedy else torch.rand(b, generator=generator, device=device, dtype=torch.float64)
    free = torch.tensor([r for r in range(b) if (r,) not in allowed], dtype=torch.long, device=device)
    groups = [(free, None, logits[free])] if len(free) else []
    if allowed:
        positions, ids, sub, _ = _gather_allowed(logits, allowed)
        groups.append((positions[0], ids, sub))
    for rows, ids, group in groups:
        log_p = torch.log_softmax(group, dim=-1)  # (n, m)
        choice = log_p.argmax(dim=-1) if greedy else _inverse_cdf(log_p.exp(), uniform[rows], top_p)  # (n,)
        tokens[rows] = choice if ids is None else ids.gather(-1, choice[:, None]).squeeze(-1)
        logprobs[rows] = log_p.gather(-1, choice[:, None]).squeeze(-1)
    return tokens, logprobs


def _inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor, top_p: float) -> torch.Tensor:
    """Per row, the index where the cumulative (nucleus-cut) mass first exceeds
    ``uniform`` × the row's kept mass; never an index of probability 0."""
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)  # (n, m)
        sorted_probs[sorted_probs.cumsum(-1) - sorted_probs > top_p] = 0.0
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    cdf = probs.double().cumsum(dim=-1)  # (n, m)
    index = torch.searchsorted(cdf, (uniform * cdf[:, -1])[:, None], right=True).squeeze(-1)  # (n,)
    last = probs.shape[-1] - 1 - (probs > 0).flip(-1).int().argmax(dim=-1)  # the last positive entry
    return torch.minimum(index, last)
