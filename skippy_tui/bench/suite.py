"""What the bench runs: the prompt suite, the methods (columns) and the identity grid's settings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine.sampling.params import SamplingParams
from .core import BenchPrompt

LIGHTHOUSE = (
    "The old lighthouse stood on the edge of the cliff for more than a hundred years. Every night its "
    "keeper climbed the narrow stairs to light the lamp, and every morning he wrote the weather in a small "
    "blue notebook. Ships passing the rocky coast trusted its beam, and the fishermen of the village said "
    "that no storm had ever put it out. When the keeper grew old, his daughter took over the work, and she "
    "kept the same notebook on the same shelf beside the lamp."
)
TYPOS = (
    "Our team meeting will take place on Thursday at ten oclock in the main conference room. Please bring "
    "your laptop and the latest version of the project report. We will discus the budget for the next "
    "quarter, review the timeline, and agree on the tasks for each member of the team. If you can not "
    "attend, send a short summary of your progres to the project manager before the meeting begins."
)
CODE_TO_EDIT = """def summarize(items, key, limit=10):
    \"\"\"Group items by key and return the largest groups with their totals.\"\"\"
    groups = {}
    for item in items:
        name = item.get(key)
        if name is None:
            continue
        group = groups.setdefault(name, {"count": 0, "total": 0.0})
        group["count"] += 1
        group["total"] += float(item.get("amount", 0))
    ranked = sorted(groups.items(), key=lambda pair: pair[1]["total"], reverse=True)
    result = []
    for name, group in ranked[:limit]:
        average = group["total"] / group["count"]
        result.append({"name": name, "count": group["count"], "total": group["total"], "average": average})
    return result
"""
SUITE: tuple[BenchPrompt, ...] = (
    BenchPrompt("chat", "chat", "What are three simple habits that help people sleep better? Explain each briefly."),
    BenchPrompt(
        "code",
        "code",
        "Write a Python function is_palindrome(s) that ignores case and punctuation. "
        "Include a docstring and two example calls.",
    ),
    BenchPrompt(
        "rewrite-replace",
        "rewrite",
        "Rewrite the following text exactly, but replace the word 'lighthouse' with 'tower'. "
        "Change nothing else.\n\n" + LIGHTHOUSE,
    ),
    BenchPrompt(
        "rewrite-typos",
        "rewrite",
        "Correct the spelling mistakes in the following text and change nothing else. "
        "Reply with the corrected text only.\n\n" + TYPOS,
    ),
    BenchPrompt("long-form", "long-form", "Write a detailed essay about the history of the printing press.", 2.0),
    # where the sources disagree most: a long copy with one change, and free text that quotes nothing
    BenchPrompt(
        "code-edit",
        "rewrite",
        "Return the following Python function with one change: rename the parameter 'items' to "
        "'records'. Change nothing else.\n\n" + CODE_TO_EDIT,
        2.0,
    ),
    BenchPrompt(
        "free-form",
        "free-form",
        "Imagine a city in the year 2300. Describe a morning walk through it, in your own words.",
    ),
)


# More prompts for the identity grid (short replies, so the grid stays cheap)
EXTRA: tuple[BenchPrompt, ...] = (
    BenchPrompt("haiku", "short", "Write a haiku about autumn leaves."),
    BenchPrompt("recipe", "short", "Give me a short recipe for pancakes."),
    BenchPrompt("translate", "short", "Translate 'good morning' into Spanish and German."),
    BenchPrompt("arithmetic", "short", "What is 17 times 23? Show your working."),
    BenchPrompt("sky", "short", "Explain in two sentences why the sky is blue."),
    BenchPrompt("formal", "short", "Rewrite this sentence more formally: hey, can u send me the file asap?"),
)
WARMUP_PROMPT = "Name three colours."
DEFAULT_KS = (1, 2, 4, 8)
IDENTITY_KS = (1, 4, 8)  # plus auto
ACCEPTANCE_K = 4  # the k at which sampled acceptance is compared with greedy
SHORT = {"coupled": "cpl", "rejection": "rej"}  # column suffix of a method under a second sampler


@dataclass(frozen=True)
class Method:
    """A decoding method: its column name, the speculation settings it runs with and
    its overrides of the bench's sampling settings (e.g. the sampler).

    ``variant``: "" for the main columns, else the suffix of a second sampler's
    column (``rej``) or ``control`` (:data:`CONTROL`); costs and goals are taken from
    the main columns only.
    """

    name: str
    settings: dict[str, Any]
    needs_model: bool = False
    sampling: dict[str, Any] = field(default_factory=dict)
    variant: str = ""

    @property
    def sampler(self) -> str:
        return self.sampling.get("sampler", "coupled")


DEFAULT = "default"
"""The column of the default configuration: source = "auto", n_draft = "auto"."""

CONTROL = "default again"
"""``--control``'s column: the default configuration a second time, with its own learned
state. Equal methods, so its ratio to the default is what the bench's noise alone makes of
two methods (an A/A comparison); it is no "other method" of the default's goal."""


MTP = "mtp "
"""The name prefix of the MTP heads' columns (``mtp k=4``, ``mtp auto``)."""


def _drafting(prefix: str, source: str, ks: Sequence[int]) -> list[tuple[str, dict[str, Any]]]:
    """Fixed k and adaptive k with one draft source: ``k=4``, ``auto`` (or ``mtp k=4``, ``mtp auto``)."""
    out = [(f"{prefix}k={k}", {"enabled": True, "source": source, "n_draft": k}) for k in ks]
    out.append((f"{prefix}auto", {"enabled": True, "source": source, "n_draft": "auto"}))
    return out


def methods_for(
    ks: Sequence[int],
    has_model: bool,
    samplers: Sequence[str] = ("coupled",),
    control: bool = False,
    has_mtp: bool = False,
) -> list[Method]:
    """plain, k=… (fixed) and auto with the draft model, ``mtp k=…`` and ``mtp auto`` with
    the target's MTP heads, ngram, ngram+model and the default configuration (auto source
    and k); each drafting column only where its drafter is loaded.

    ``has_model``: a draft model is loaded; ``has_mtp``: MTP heads are. Without a draft
    model the engine's ``model`` source drafts with the heads, so the model columns would
    repeat the mtp ones: they are left out, and ngram+model (the n-gram, else the heads)
    is named ``ngram+mtp``. The default is source ``auto`` in every case (it uses the
    draft model where there is one, else the heads, else the n-gram alone).

    Every method runs under ``samplers[0]``; each further sampler repeats the methods a
    model or head drafts for (``k=4 rej``, ``mtp k=4 rej``). Plain decoding is the same
    under any sampler. ``control``: the default once more, last (:data:`CONTROL`).
    """
    first = {"sampler": samplers[0]}
    drafting = _drafting("", "model", ks) if has_model else []
    drafting += _drafting(MTP, "mtp", ks) if has_mtp else []
    combined = "ngram+model" if has_model else "ngram+mtp" if has_mtp else ""
    late = [(combined, {"enabled": True, "source": "ngram+model", "n_draft": "auto"})] if combined else []
    late.append((DEFAULT, {"enabled": True, "source": "auto", "n_draft": "auto"}))
    drafted = has_model or has_mtp  # a drafter with probabilities: the sampler matters
    out = [Method("plain", {"enabled": False}, sampling=first)]
    out += [Method(name, st, True, first) for name, st in drafting]
    out.append(Method("ngram", {"enabled": True, "source": "ngram", "n_draft": "auto"}, sampling=first))
    out += [Method(name, st, drafted, first) for name, st in late]
    for s in samplers[1:] if drafted else ():
        out += [Method(f"{name} {SHORT[s]}", st, True, {"sampler": s}, SHORT[s]) for name, st in drafting + late]
    if control:
        default = next(m for m in out if m.name == DEFAULT)
        out.append(Method(CONTROL, default.settings, default.needs_model, default.sampling, "control"))
    return out


def greedy_method(k: int, source: str = "model") -> Method:
    """Greedy decoding at fixed k with ``source``: the acceptance a sampled k is compared with."""
    prefix = MTP if source == "mtp" else ""
    return Method(
        f"{prefix}k={k} greedy", {"enabled": True, "source": source, "n_draft": k}, True, {"temperature": 0.0}
    )


def acceptance_k(ks: Sequence[int]) -> int:
    """The k at which sampled acceptance is compared with greedy: 4, else the largest asked."""
    return ACCEPTANCE_K if ACCEPTANCE_K in ks else max(ks)


PENALTIES_OFF = {"repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
PENALTIES_ON = {"repeat_penalty": 1.3, "presence_penalty": 0.2, "frequency_penalty": 0.2}
IDENTITY_TEMPERATURE = 0.8
IDENTITY_TOKENS = 48


def penalty_settings(params: SamplingParams) -> dict[str, dict[str, Any]]:
    """The grid's ``off`` and ``on`` overrides: ``on`` keeps configured penalties,
    else :data:`PENALTIES_ON` (over ``repeat_last_n`` tokens, 64 when it is 0)."""
    on = {k: getattr(params, k) for k in PENALTIES_ON} if params.penalised else dict(PENALTIES_ON)
    on["repeat_last_n"] = params.repeat_last_n if params.repeat_last_n != 0 else 64
    return {"off": dict(PENALTIES_OFF), "on": on}
