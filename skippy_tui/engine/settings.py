"""What the engine needs in: model, speculation and generation settings.

Plain frozen dataclasses, validated on construction (before any native
allocation). The TOML config and the CLI flags are turned into these by
:mod:`skippy_tui.config`; the engine never reads files or flags itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from .bounds import MAX_DRAFT_TOKENS, check_int, validate_speculation
from .errors import BoundsError
from .native.model import FLASH_ATTN, KV_CACHE_TYPES, SPLIT_MODES, LoadParams, max_devices
from .native.rpc import RpcError, parse_endpoint
from .options import DRAFT_SOURCES, PROFILES, bounds, default
from .sampling.params import SamplingParams

# Keys a draft inherits from the target when it leaves them unset.
MODEL_KEYS = tuple(f.name for f in dataclasses.fields(LoadParams))


def _choice(key: str, value: object, allowed: dict[str, object] | tuple[str, ...]) -> None:
    if value not in allowed:
        raise BoundsError(key, value, "one of " + ", ".join(allowed))


MAX_DEVICES = max_devices()
"""The most devices one model may be split over (llama.cpp's ``llama_max_devices``)."""


def validate_load_params(prefix: str, p: LoadParams) -> None:
    """Check one model's native settings; raises ``BoundsError`` naming ``prefix.key``."""
    check_int(f"{prefix}.n_ctx", p.n_ctx, *bounds("target.n_ctx"))
    check_int(f"{prefix}.n_batch", p.n_batch, *bounds("target.n_batch"))
    check_int(f"{prefix}.n_ubatch", p.n_ubatch, *bounds("target.n_ubatch"))
    check_int(f"{prefix}.threads", p.threads, *bounds("target.threads"))
    check_int(f"{prefix}.threads_batch", p.threads_batch, *bounds("target.threads_batch"))
    check_int(f"{prefix}.n_gpu_layers", p.n_gpu_layers, *bounds("target.n_gpu_layers"))
    check_int(f"{prefix}.main_gpu", p.main_gpu, *bounds("target.main_gpu"))
    _choice(f"{prefix}.split_mode", p.split_mode, SPLIT_MODES)
    _choice(f"{prefix}.flash_attn", p.flash_attn, FLASH_ATTN)
    _choice(f"{prefix}.cache_type_k", p.cache_type_k, KV_CACHE_TYPES)
    _choice(f"{prefix}.cache_type_v", p.cache_type_v, KV_CACHE_TYPES)
    for key in ("mmap", "mlock", "swa_full"):
        if not isinstance(getattr(p, key), bool):
            raise BoundsError(f"{prefix}.{key}", getattr(p, key), "true or false")
    if not (isinstance(p.hugepages, bool) or p.hugepages == "auto"):
        raise BoundsError(f"{prefix}.hugepages", p.hugepages, 'true, false or "auto"')
    if p.device is not None and (not isinstance(p.device, str) or not p.device):
        raise BoundsError(f"{prefix}.device", p.device, "a device name such as CPU or CUDA0")
    for endpoint in p.rpc:
        try:
            parse_endpoint(endpoint)
        except RpcError:
            raise BoundsError(f"{prefix}.rpc", list(p.rpc), 'a list of "host:port" (port 1..65535)') from None
    if len(set(p.rpc)) != len(p.rpc):
        raise BoundsError(f"{prefix}.rpc", list(p.rpc), "a list of distinct servers")
    split = p.tensor_split
    if split and (len(split) > MAX_DEVICES or any(not 0 <= x < float("inf") for x in split) or not sum(split) > 0):
        raise BoundsError(
            f"{prefix}.tensor_split", list(split), f"at most {MAX_DEVICES} shares >= 0, not all 0, e.g. [3, 1]"
        )


@dataclass(frozen=True)
class ModelSpec:
    """One model: its GGUF path (``None`` = the embedded default) and native settings.

    ``chat_template``: a llama.cpp built-in name or Jinja text overriding the GGUF's.
    """

    path: Path | None
    load: LoadParams = field(default_factory=LoadParams)
    chat_template: str | None = None


DRAFT_LOAD = {"flash_attn": "auto"}
"""The draft's own defaults, over the target's settings and under the draft's keys.

Flash attention off buys batch invariance (README, "Exactness"), and only the target
needs it: the draft's logits never decide a token (the target verifies every one, and
the coupled sampler draws from the target's distribution), so they may depend on how
its calls are batched, and the draft takes the faster kernels.

Not for a draft that is the target's own file, or one asked to load like the target
(``[draft] like_target``): there the draft's logits could equal the target's, and with
other kernels in the draft alone their rounding read as draft disagreement, in the one
pair people check a setup with (:func:`draft_load_params`)."""

NUMERIC_KEYS = ("flash_attn", "repack", "cache_type_k", "cache_type_v")
"""The load settings that change a decode's arithmetic but not where it runs or what it
holds: what :func:`numeric_settings` says of a draft."""


def draft_load_params(target: LoadParams, overrides: dict[str, object], like_target: bool = False) -> LoadParams:
    """The draft's native settings: the target's, then :data:`DRAFT_LOAD` (unless
    ``like_target``: the draft is the target's file, or was asked to load like it), then
    the draft's own keys on top.

    The draft so inherits the target's n_ctx, mmap, mlock and device (as the
    skippy draft runner does) and may override threads, GPU layers, device,
    KV cache types, flash attention — or any other key.
    """
    unknown = set(overrides) - set(MODEL_KEYS)
    if unknown:
        key = sorted(unknown)[0]
        raise BoundsError(f"draft.{key}", overrides[key], "a model key: " + ", ".join(MODEL_KEYS))
    defaults = {} if like_target else DRAFT_LOAD
    return dataclasses.replace(target, **{**defaults, **overrides})  # type: ignore[arg-type]


def same_file(a: Path | None, b: Path | None) -> bool:
    """Whether two model paths name one file (through links or relative paths too); a
    missing file is compared by its resolved path."""
    if a is None or b is None:
        return False
    try:
        return a.expanduser().samefile(b.expanduser())
    except OSError:
        return a.expanduser().resolve() == b.expanduser().resolve()


def numeric_settings(target: LoadParams, draft: LoadParams) -> str:
    """Which numeric settings (:data:`NUMERIC_KEYS`) the draft runs with, for the draft
    finder and F3: ``the target's: flash_attn off, repack off, …``, or ``its own:
    flash_attn auto (target off), repack off, …`` (where they differ, the target's too)."""

    def word(value: object) -> str:
        return ("on" if value else "off") if isinstance(value, bool) else str(value)

    parts = []
    for key in NUMERIC_KEYS:
        mine, theirs = getattr(draft, key), getattr(target, key)
        parts.append(f"{key} {word(mine)}" + ("" if mine == theirs else f" (target {word(theirs)})"))
    same = all(getattr(draft, k) == getattr(target, k) for k in NUMERIC_KEYS)
    return ("the target's: " if same else "its own: ") + ", ".join(parts)


FAST_LOAD = {"flash_attn": "auto", "repack": True}
"""What ``profile = "fast"`` changes in both models' load settings (keys set explicitly win)."""


@dataclass(frozen=True)
class SpeculationSettings:
    """How proposals are made and checked.

    ``n_draft``: tokens per proposal (k), 1..4096, or ``"auto"``: each step's k
    is chosen in ``0..n_draft_max`` to maximise measured tokens/s
    (:mod:`adaptive`). ``n_draft_max``: the largest k ``auto`` may pick,
    1..4096 (default 8). ``n_min``: below this many proposed tokens a step
    decodes plainly. ``p_min``: drafting stops when the draft's top probability
    falls below it. ``source``: ``model`` (the draft model; without one, the
    target's MTP heads), ``mtp`` (the target's multi-token-prediction heads, or an
    MTP drafter file given as the draft: :mod:`.drafting.mtp`), ``ngram`` (prompt lookup, no
    model needed), ``ngram+model`` (n-gram when it matches, else the model) or
    ``auto``: with ``n_draft = "auto"`` each step chooses plain decoding, the n-gram
    proposal or the model's (the MTP heads' where no draft model is loaded), and its length,
    from measured costs and acceptance (:class:`~.policy.chooser.SourceChooser`);
    with a fixed k it drafts as ``ngram+model``. ``n_draft_max_ngram``: the
    longest n-gram proposal ``auto`` may make (1..4096, default 32: a proposal
    that is copied costs almost nothing, so a reliable one may run long).
    ``enabled`` False = plain decoding. ``exact``:
    measure at load how large a verify batch the target decodes bit-identically
    to single rows, and verify in chunks of that size (:mod:`invariance`).
    ``profile``: ``"auto"`` (the default): verify exactly in the chunks the probe
    certifies where it certifies at least 2 rows, else in one batch, not bit-exact
    (:mod:`.policy.exactness`); ``"exact"``: the certified chunks always, row by row if
    need be; ``"fast"``: flash attention and CPU weight repacking on, one verify
    batch, no probe (``exact`` False); faster on quantized CPU targets, but a reply
    may differ from plain decoding where the target's top two logits nearly tie.
    The config applies the load settings; this field names the profile for the
    verify plan, the status bar and traces.

    Raises:
        BoundsError: per the bounds contract.
    """

    enabled: bool = default("speculation.enabled")
    n_draft: int | str = default("speculation.n_draft")
    n_min: int = default("speculation.n_min")
    p_min: float = default("speculation.p_min")
    source: str = default("speculation.source")
    n_draft_max: int = default("speculation.n_draft_max")
    exact: bool = default("speculation.exact")
    n_draft_max_ngram: int = default("speculation.n_draft_max_ngram")
    profile: str = default("speculation.profile")

    def __post_init__(self) -> None:
        if self.n_draft != "auto":
            try:
                check_int("n_draft", self.n_draft, 1, MAX_DRAFT_TOKENS)
            except BoundsError as e:  # say the other choice too
                raise BoundsError("n_draft", self.n_draft, f'{e.bound} or "auto"') from None
        check_int("n_draft_max", self.n_draft_max, *bounds("speculation.n_draft_max"))
        check_int("n_draft_max_ngram", self.n_draft_max_ngram, *bounds("speculation.n_draft_max_ngram"))
        validate_speculation(1, self.k_max, self.n_min, self.p_min)
        _choice("speculation.source", self.source, DRAFT_SOURCES)
        _choice("speculation.profile", self.profile, PROFILES)

    @property
    def auto(self) -> bool:
        """True when each step's k is chosen adaptively."""
        return self.n_draft == "auto"

    @property
    def k_max(self) -> int:
        """The largest k a draft model's step may propose: ``n_draft``, or ``n_draft_max`` for ``auto``."""
        return self.n_draft_max if self.n_draft == "auto" else self.n_draft  # type: ignore[return-value]

    @property
    def k_max_ngram(self) -> int:
        """The largest k an n-gram step may propose: ``n_draft``, or ``n_draft_max_ngram`` for ``auto``
        (with ``source`` ``ngram`` or ``auto``)."""
        if self.n_draft != "auto" or self.source not in ("ngram", "auto"):
            return self.k_max
        return self.n_draft_max_ngram

    @property
    def k_limit(self) -> int:
        """The largest k any step may propose: what verify batches and the probe must hold."""
        return max(self.k_max, self.k_max_ngram)


@dataclass(frozen=True)
class GenerationSettings:
    """Per-reply settings: sampling, length, stops.

    ``max_tokens``: reply length cap in tokens (1..1,048,576).
    ``stop``: stop strings, matched across token boundaries.
    """

    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int = default("generation.max_tokens")
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_int("max_tokens", self.max_tokens, *bounds("generation.max_tokens"))
        if not all(isinstance(s, str) for s in self.stop):
            raise BoundsError("stop", self.stop, "a list of strings")
