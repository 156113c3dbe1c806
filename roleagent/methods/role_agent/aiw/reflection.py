"""The failure-analyst role: reflections on failed trajectories (Role-Agent §3.3).

"For each failed trajectory, we feed all interaction sequences, along with the task
description and objective, into an LLM for analysis ... to generate a failure-mode
reflection that includes the failure type, core lessons, and query contexts to be used
for retrieving similar tasks" (§3.3, "Failure Mode Analysis"; prompt: Wang et al., 2026, arXiv 2606.10917, Fig. 8).

A :class:`Reflection` comes from one of four sources:

* ``"policy"`` / ``"llm"`` — :func:`parse_reflection` of the analyst's text (the policy
  itself, the paper's default, or another LLM);
* ``"rule"`` — :func:`rule_reflection` of an environment's rule-based
  ``Environment.diagnose`` result;
* ``"fallback"`` — :func:`fallback_reflection`, a cheap heuristic used when the analyst's
  text has no recognisable DOMINANT_TYPE and no rule diagnosis is available.

``dominant_type`` is always a label of the environment's failure taxonomy (paper Table 6)
or ``"other"``: off-taxonomy answers are mapped to the closest label by token overlap.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from roleagent.methods.role_agent.aiw.prompts import _clip, task_instruction
from roleagent.types import Trajectory

FIELDS = ("DOMINANT_TYPE", "DETAIL", "CRITICAL_STEP", "CORE_LESSON", "RETRIEVAL_QUERY")
OTHER = "other"

# Words that carry no failure-mode meaning when comparing labels.
_LABEL_STOP = {
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "on",
    "and",
    "or",
    "error",
    "failure",
    "mistake",
    "issue",
    "problem",
    "type",
    "mode",
}


@dataclass
class Reflection:
    """One failure-mode reflection (the fields of Figure 8's ``<reflection>`` block)."""

    dominant_type: str
    detail: str = ""
    critical_step: int | None = None  # 1-based step number, as rendered in the prompt
    core_lesson: str = ""
    retrieval_query: str = ""
    source: str = "llm"  # "policy" | "llm" | "rule" | "fallback"
    parsed_ok: bool = True  # every field of the block was found
    raw_type: str = ""  # the label as the analyst wrote it
    type_status: str = "exact"  # "exact" | "mapped" (off-taxonomy, mapped) | "other"
    missing: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["missing"] = list(self.missing)
        return d

    def query_text(self) -> str:
        """Text used to look for similar failures (RETRIEVAL_QUERY first)."""
        parts = [self.retrieval_query, self.dominant_type.replace("_", " "), self.core_lesson]
        if not self.retrieval_query:
            parts.append(self.detail)
        return " ".join(p for p in parts if p)

    def summary(self, limit: int = 240, entry: str = "lesson") -> str:
        """A Figure-9 entry's line: ``type: lesson`` (``entry="query"``: ``type: retrieval query``)."""
        fields = (self.core_lesson, self.detail, self.retrieval_query)
        text = next((x for x in (fields[::-1] if entry == "query" else fields) if x), "")
        return _clip(f"{self.dominant_type}: {text}", limit)


# ----------------------------------------------------------------- labels ----------


def normalize_label(text: str) -> str:
    """``"Wrong Target-Location"`` → ``"wrong_target_location"``."""
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_")


def _label_tokens(label: str) -> set[str]:
    return {t for t in normalize_label(label).split("_") if t and t not in _LABEL_STOP}


def map_to_taxonomy(raw: str, taxonomy: Sequence[str]) -> tuple[str, str]:
    """Map an analyst's label to the taxonomy: ``(label, status)``.

    Exact (after normalisation) → ``"exact"``. Otherwise a taxonomy label contained in the
    text (longest wins), else the label with the most shared tokens (ties: higher Jaccard,
    then taxonomy order) → ``"mapped"``. Nothing shared → ``("other", "other")``. With an
    empty taxonomy the normalised label itself is kept.
    """
    norm = normalize_label(raw)
    if not taxonomy:
        return (norm or OTHER), ("exact" if norm else "other")
    labels = [normalize_label(t) for t in taxonomy]
    if norm in labels:
        return taxonomy[labels.index(norm)], "exact"
    if not norm:
        return OTHER, "other"
    if norm == OTHER:
        return OTHER, "exact"
    padded = f"_{norm}_"
    contained = [i for i, lab in enumerate(labels) if f"_{lab}_" in padded]
    if contained:
        best = max(contained, key=lambda i: len(labels[i]))
        # "wrong_receptacle because ..." is the label itself followed by prose.
        return taxonomy[best], ("exact" if padded.startswith(f"_{labels[best]}_") else "mapped")
    tokens = _label_tokens(norm)
    best_i, best_key = -1, (0, 0.0)
    for i, lab in enumerate(labels):
        lt = _label_tokens(lab)
        shared = len(tokens & lt)
        if not shared:
            continue
        key = (shared, shared / len(tokens | lt))
        if key > best_key:
            best_i, best_key = i, key
    if best_i >= 0:
        return taxonomy[best_i], "mapped"
    return OTHER, "other"


# ---------------------------------------------------------------- parsing ----------

# Linear time on any input (model output is adversarial): the key is found by a
# look-behind instead of consuming the spaces/quotes before it, and everything between
# the key and its ``:``/``=`` is one character class, so no two quantifiers compete for
# the same characters (the previous pattern had four ``\s*`` in a row and backtracked
# exponentially on a key followed by a long run of spaces).
_KEY_RE = re.compile(
    r"""(?:^|(?<=[\s{,"'*#>\-]))"""
    r"(DOMINANT[\s_\-]*TYPE|DETAIL|CRITICAL[\s_\-]*STEP|CORE[\s_\-]*LESSON"
    r"|RETRIEVAL[\s_\-]*QUERY)"
    r"""[\s*_"']*[:=]""",
    re.IGNORECASE,
)
#: A number with more significant digits than this is no step or candidate number
#: (and ``int()`` refuses strings of more than 4,300 digits).
MAX_NUMBER_DIGITS = 9


def parse_small_int(digits: str) -> int | None:
    """``int`` of a run of decimal digits, or None when it has more than
    :data:`MAX_NUMBER_DIGITS` significant digits.

    >>> parse_small_int("007"), parse_small_int("9" * 5000)
    (7, None)
    """
    significant = digits.lstrip("0") or "0"
    return int(significant) if len(significant) <= MAX_NUMBER_DIGITS else None


def _clean_value(value: str) -> str:
    value = value.strip()
    value = re.sub(r"</?\s*reflection\s*>", " ", value, flags=re.IGNORECASE)
    value = value.replace("**", "").replace("__", " ").replace("`", "")
    value = " ".join(value.split())
    value = value.strip(" ,;}{*#>-")
    if len(value) >= 2 and value[0] == "[" and value[-1] == "]":
        value = value[1:-1]
    value = value.strip().strip("\"'").strip()
    return value.rstrip(",").strip().strip("\"'").strip()


# The Figure-8 placeholders: a model that echoes the schema before answering.
_PLACEHOLDERS = (
    "category from step 1",
    "1-2 sentences explaining why",
    "step number and brief description",
    "the generalizable rule an agent",
    "the query for the retrieval stage",
)


def _is_placeholder(value: str) -> bool:
    low = value.lower()
    return any(p in low for p in _PLACEHOLDERS)


def _extract_fields(text: str) -> dict[str, list[str]]:
    """Every value of every key, in order of appearance (placeholders dropped)."""
    matches = list(_KEY_RE.finditer(text))
    found: dict[str, list[str]] = {}
    for i, m in enumerate(matches):
        key = re.sub(r"[\s_\-]+", "_", m.group(1).upper())
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        value = _clean_value(text[m.end() : end])
        if value and not _is_placeholder(value):
            found.setdefault(key, []).append(value)
    return found


def _reflection_block(text: str) -> str:
    """The ``<reflection>`` blocks (all of them, a missing closing tag tolerated), or the
    whole text when there is none."""
    blocks = re.findall(
        r"<\s*reflection\s*>(.*?)(?=<\s*/\s*reflection\s*>|<\s*reflection\s*>|$)", text, flags=re.IGNORECASE | re.DOTALL
    )
    return "\n".join(blocks) if blocks else text


def parse_step_number(value: str) -> int | None:
    """The step number of a CRITICAL_STEP value: the integer after "step" (an action quoted
    first names its objects' numbers first), else the first integer; None when there is none
    or it is absurdly long (see :func:`parse_small_int`).

    >>> parse_step_number('Step 3, went to cabinet 1'), parse_step_number('"take apple 1 from fridge 1", step 5')
    (3, 5)
    """
    m = re.search(r"\bstep\s*#?\s*(\d+)", value or "", re.IGNORECASE) or re.search(r"(\d+)", value or "")
    return parse_small_int(m.group(1)) if m else None


def parse_reflection(text: str, taxonomy: Sequence[str], source: str = "llm") -> Reflection | None:
    """Parse a Figure-8 ``<reflection>`` block.

    Robust to markdown (``**DOMINANT_TYPE:**``, bullets, headings, code fences), key case
    and spelling (``Dominant Type``, ``dominant-type``), JSON-ish quoting
    (``"CRITICAL_STEP": "Step 3, ..."`` as in the paper's case study), a missing closing
    tag, missing fields (left empty, listed in ``missing``, ``parsed_ok`` False) and
    off-taxonomy types (mapped, see :func:`map_to_taxonomy`).

    Returns None when no failure type can be recognised at all: no DOMINANT_TYPE field and
    no taxonomy label anywhere in the text. The caller then falls back (rule diagnosis or
    :func:`fallback_reflection`).
    """
    text = text or ""
    block = _reflection_block(text)
    fields = _extract_fields(block)
    if "DOMINANT_TYPE" not in fields and block is not text:
        fields = _extract_fields(text)
    label, status, raw_type = None, "other", ""
    for value in fields.get("DOMINANT_TYPE", []):
        # "[wrong_receptacle] because ..." or "Missing precondition - the agent ...": the
        # label is the head of the value.
        head = re.split(r"[.;\n]|\s[-–—:(]\s?|,\s", value, maxsplit=1)[0]
        cand, cand_status = map_to_taxonomy(head, taxonomy)
        if cand_status == "other":
            cand, cand_status = map_to_taxonomy(value, taxonomy)
        if label is None or (status == "other" and cand_status != "other"):
            label, status, raw_type = cand, cand_status, value
        if status != "other":
            break
    if label is None:
        label, status = _label_in_text(text, taxonomy)
        if label is None:
            return None

    def first(key: str) -> str:
        values = fields.get(key)
        return values[0] if values else ""

    missing = tuple(f for f in FIELDS if not fields.get(f))
    return Reflection(
        dominant_type=label,
        detail=first("DETAIL"),
        critical_step=parse_step_number(first("CRITICAL_STEP")),
        core_lesson=first("CORE_LESSON"),
        retrieval_query=first("RETRIEVAL_QUERY"),
        source=source,
        parsed_ok=not missing,
        raw_type=raw_type,
        type_status=status,
        missing=missing,
    )


def _label_in_text(text: str, taxonomy: Sequence[str]) -> tuple[str | None, str]:
    """A taxonomy label written anywhere in free text (``"... wrong receptacle ..."``)."""
    norm = f"_{normalize_label(text)}_"
    hits = [
        (norm.find(f"_{normalize_label(t)}_"), -len(t), t)
        for t in taxonomy
        if normalize_label(t) and f"_{normalize_label(t)}_" in norm
    ]
    if not hits:
        return None, "other"
    return min(hits)[2], "mapped"


# ----------------------------------------------------------- rule/fallback ----------


def rule_reflection(diagnosis: dict[str, Any] | None, taxonomy: Sequence[str]) -> Reflection | None:
    """A reflection from ``Environment.diagnose`` output (source ``"rule"``).

    Accepts ``dominant_type`` (or ``type`` / ``label`` / ``failure_type``), ``detail``,
    ``critical_step`` (int or text), ``core_lesson`` (or ``lesson``), ``retrieval_query``
    (or ``query``). Returns None when there is no diagnosis.
    """
    if not diagnosis:
        return None
    raw = next((str(diagnosis[k]) for k in ("dominant_type", "type", "label", "failure_type") if diagnosis.get(k)), "")
    label, status = map_to_taxonomy(raw, taxonomy)
    step = diagnosis.get("critical_step")
    if not isinstance(step, int) or isinstance(step, bool):
        step = parse_step_number(str(step)) if step is not None else None
    detail = str(diagnosis.get("detail", "") or "")
    lesson = str(diagnosis.get("core_lesson", diagnosis.get("lesson", "")) or "")
    query = str(diagnosis.get("retrieval_query", diagnosis.get("query", "")) or "")
    if not query:
        query = " ".join(x for x in (label.replace("_", " "), detail) if x)
    return Reflection(
        dominant_type=label,
        detail=detail,
        critical_step=step,
        core_lesson=lesson,
        retrieval_query=query,
        source="rule",
        parsed_ok=bool(raw),
        raw_type=raw,
        type_status=status,
    )


def fallback_reflection(trajectory: Trajectory, taxonomy: Sequence[str]) -> Reflection:
    """Heuristic reflection when neither the analyst nor a rule produced one.

    Mostly-invalid actions → ``action_format_error``; an action repeated ≥ 3 times → the
    first taxonomy label about repetition; else ``other``. Only labels present in the
    taxonomy are used.
    """
    steps = trajectory.steps
    labels = [normalize_label(t) for t in taxonomy]

    def pick(*candidates: str) -> str | None:
        for c in candidates:
            for lab, orig in zip(labels, taxonomy):
                if lab == c or (c.endswith("*") and lab.startswith(c[:-1])):
                    return orig
        return None

    label, detail, crit = None, "", None
    if steps:
        invalid = [i for i, s in enumerate(steps, 1) if not s.valid]
        actions = Counter((s.action or s.action_text).strip().lower() for s in steps if s.valid)
        if len(invalid) * 2 >= len(steps):
            label = pick("action_format_error")
            detail = f"{len(invalid)} of {len(steps)} actions could not be parsed."
            crit = invalid[0] if invalid else None
        elif actions and actions.most_common(1)[0][1] >= 3:
            act, n = actions.most_common(1)[0]
            label = pick(
                "repeated_failed_action",
                "repetitive_exploration",
                "repeated_query",
                "repeated_retrieval_query",
                "navigation_loop",
                "repeat*",
                "repetitive*",
            )
            detail = f"The action '{_clip(act, 80)}' was repeated {n} times."
            crit = next((i for i, s in enumerate(steps, 1) if (s.action or s.action_text).strip().lower() == act), None)
    if label is None:
        label = OTHER
        detail = detail or f"The episode ended without success after {len(steps)} steps."
    query = f"{label.replace('_', ' ')} {task_instruction(trajectory, 200)}"
    return Reflection(
        dominant_type=label,
        detail=detail,
        critical_step=crit,
        core_lesson="",
        retrieval_query=query,
        source="fallback",
        parsed_ok=False,
        raw_type="",
        type_status="other" if label == OTHER else "mapped",
        missing=("CORE_LESSON",),
    )


def trajectory_summary(trajectory: Trajectory, limit: int = 400) -> str:
    """A short one-line summary stored with the failure (for viewers and the plot)."""
    steps = trajectory.steps
    last = steps[-1] if steps else None
    last_action = (last.action or last.action_text) if last else ""
    final = trajectory.final_observation or (last.observation if last else "")
    text = (
        f"{len(steps)} steps; return {trajectory.episode_return:.2f}; "
        f"last action: {_clip(last_action, 80)}; final: {_clip(final, 160)}"
    )
    return _clip(text, limit)
