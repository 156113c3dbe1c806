"""Decoding constrained to a set of token sequences: a policy over admissible commands.

GLAM (Carta et al., 2023, arXiv:2302.02662) makes the LLM a distribution over the
environment's admissible actions, so every action is executable and the gradient goes to
the command that was executed. Here the same is obtained by constrained decoding: a row's
allowed sequences (the token ids of each admissible command's completion) form a prefix
tree; at each step the row may only emit a token that continues some sequence, and it
finishes exactly when a full sequence has been emitted. The sampling distribution is the
model's renormalised over the allowed tokens (:func:`restrict_logits`), so a position with
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

__all__ = ["NEG", "TokenTrie", "restrict_logits"]

#: What a forbidden token's logit becomes: finite, so that ``0 · NEG = 0`` in an entropy,
#: and exp(NEG − max) = 0 in every softmax.
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


def _children(node: dict[int, dict]) -> list[int]:
    return sorted(t for t in node if t != _END)


def restrict_logits(logits: torch.Tensor, allowed: Mapping[tuple[int, ...], Sequence[int]]) -> torch.Tensor:
    """``logits`` (..., V) with every token outside its position's allowed set set to
    :data:`NEG`; ``allowed`` maps the index of a position over the leading axes to its
    token ids, positions not in it stay free. Apply it to the temperature-scaled logits:
    the restricted distribution is then ``softmax(z / T)`` renormalised over the set.

    Example: logits (1, 3) = [[0, 0, ln 2]] restricted to {(0,): [1, 2]} → log-softmax
    [[NEG-ish, ln 1/3, ln 2/3]]; restricted to {(0,): [2]} → log-prob 0 for token 2.
    """
    if not allowed:
        return logits
    device = logits.device
    positions = tuple(torch.tensor(axis, device=device) for axis in zip(*allowed))  # one index tensor per axis
    owner = torch.tensor([i for i, ids in enumerate(allowed.values()) for _ in ids], device=device)
    tokens = torch.tensor([int(t) for ids in allowed.values() for t in ids], dtype=torch.long, device=device)
    keep = torch.ones_like(logits, dtype=torch.bool)
    keep[positions] = False
    keep[tuple(axis[owner] for axis in positions) + (tokens,)] = True
    return logits.masked_fill(~keep, NEG)
