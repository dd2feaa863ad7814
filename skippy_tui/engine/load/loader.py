"""From settings to a ready :class:`Speculator`: check everything, then load.

Order matters: every check that can refuse the request (bounds, missing or
corrupt files, an incompatible pair, a batch too small for the verify batch)
runs before any weights are loaded or native memory is allocated.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..bounds import ContextCapacity, validate_capacity
from ..chat import ChatTemplate, template_for
from ..drafting.model import ModelDrafter
from ..drafting.mtp import HiddenLog, MtpDrafter
from ..errors import CancelledError, IncompatibleModelsError, ModelFileError, StateError
from ..native import rpc
from ..native.invariance import cached_probe, probe_rows
from ..native.model import Context, LoadParams, Model
from ..native.mtp import MtpContext
from ..native.repack import repack_crash
from ..native.window import INITIAL, fitted, grows, padded
from ..settings import ModelSpec, SpeculationSettings, numeric_settings, validate_load_params
from ..speculator import Speculator
from ..threads import lower_threads, thread_wait_note
from . import arch
from .arch import mtp_heads_usable, rollback_kind
from .compat import check_compatible
from .defaults import default_pair
from .gguf_info import ModelInfo, cached_model_info, check_model_path

Progress = Callable[[str, float], None]
"""``progress(stage, fraction)``: stage is a short human phrase, fraction in [0, 1]; a long
one says what is done, a colon, then why (:data:`PROBE_STAGE`)."""

PROBE_STAGE = (
    "measuring batch invariance: which verify batches match plain decoding bit for bit, "
    "so that replies stay exact (once per model and kernel settings)"
)
DERIVE_STAGE = "deriving the F32 default target: from the shipped Q4_1, once (later starts reuse it)"

Window = Callable[[Model, ChatTemplate], int]
"""``window(target, template)``: tokens one reply needs (its prompt's plus the reply cap)."""


@dataclass(frozen=True)
class EngineSpec:
    """Everything needed to load: the target, an optional draft, speculation settings.

    ``cache_dir`` holds derived models and the GGUF header cache. A target with
    ``path=None`` selects the embedded default pair (and, unless ``draft`` is
    given or ``use_draft`` is False, its Q4_1 draft). ``heads``: a target with MTP
    heads loads them to draft with (``--no-draft`` turns them off too).
    """

    target: ModelSpec
    draft: ModelSpec | None
    speculation: SpeculationSettings
    cache_dir: Path
    use_draft: bool = True
    heads: bool = True


# speculation settings a loaded Speculator takes through update() (exact and profile
# change what the load measured or set, so they need a new load)
LIVE_SPECULATION = ("enabled", "n_draft", "n_min", "p_min", "source", "n_draft_max", "n_draft_max_ngram")


def live_changes(before: EngineSpec | None, after: EngineSpec) -> dict[str, object] | None:
    """How the models loaded from ``before`` become ``after``'s: the speculation settings to
    pass to :meth:`Speculator.update` (``{}``: nothing to change), or None when only a new
    load will do (another file, a load key, ``exact`` or ``profile``; ``before`` None: unknown)."""
    if before is None:
        return None
    models = ("target", "draft", "use_draft", "heads")
    same_models = all(getattr(before, k) == getattr(after, k) for k in models)
    changed = {
        f.name: getattr(after.speculation, f.name)
        for f in dataclasses.fields(after.speculation)
        if getattr(before.speculation, f.name) != getattr(after.speculation, f.name)
    }
    if not same_models or any(k not in LIVE_SPECULATION for k in changed):
        return None
    return changed


def _noop(stage: str, fraction: float) -> None:
    pass


def _never() -> bool:
    return False


def resolve_paths(spec: EngineSpec, progress: Progress = _noop) -> tuple[Path, Path | None]:
    """The target and draft paths, deriving the default F32 target when needed.

    Raises:
        ModelFileError: as :func:`defaults.default_pair`.
    """
    target, draft = spec.target.path, spec.draft.path if spec.draft else None
    if target is None:
        t, d = default_pair(spec.cache_dir / "models", lambda f: progress(DERIVE_STAGE, f))
        target = t
        if draft is None and (spec.draft is None or spec.draft.path is None):
            draft = d
    return Path(target).expanduser(), (Path(draft).expanduser() if draft is not None else None)


def check_spec(spec: EngineSpec, progress: Progress = _noop) -> tuple[Path, ModelInfo, Path | None, ModelInfo | None]:
    """All checks, no weights loaded.

    Raises:
        BoundsError, ModelFileError, IncompatibleModelsError, RpcError.
    """
    validate_load_params("target", spec.target.load)
    if spec.draft is not None:
        validate_load_params("draft", spec.draft.load)
    servers = [*spec.target.load.rpc, *(spec.draft.load.rpc if spec.draft is not None and spec.use_draft else ())]
    if servers:  # an unreachable server or another protocol version: refused before any weights load
        progress("connecting to RPC servers", 0.0)
        rpc.check(servers)
    target_path, draft_path = resolve_paths(spec, progress)
    if not spec.use_draft:
        draft_path = None
    for path in (target_path, draft_path):  # refused before a stage says it reads them
        if path is not None:
            check_model_path(path)
    progress("reading GGUF headers", 0.0)
    info_cache = spec.cache_dir / "gguf-info"
    t_info = cached_model_info(target_path, info_cache)
    if t_info.mtp_only:  # llama.cpp crashes on a plain context over a file without the trunk
        raise ModelFileError(
            f"{target_path.name} is an MTP drafter file (MTP blocks without the model itself): "
            "give it as the draft of its target, not as the target"
        )
    d_info = cached_model_info(draft_path, info_cache) if draft_path is not None else None
    if d_info is not None:
        check_compatible(t_info, d_info)
        if d_info.architecture in arch.SHARED_KV_DRAFTERS:
            raise ModelFileError(
                f"the draft {d_info.path.name} is a {d_info.architecture} drafter, which drafts from the "
                "target's own KV cache: skippy-tui does not run such drafters yet (MTP heads in the target's "
                "file, an MTP drafter file of NextN blocks, or a draft model of the same tokenizer do)"
            )
        if d_info.mtp_only and (why := mtp_heads_usable(d_info.architecture, d_info.n_nextn)):
            raise ModelFileError(f"the MTP drafter {d_info.path.name} cannot draft: {why}")
        check_capacity(spec, spec.speculation.k_max, with_draft=True, target_arch=t_info.architecture)
    elif (spec.speculation.enabled and spec.speculation.source != "model") or t_info.mtp_heads:
        # n-gram drafting or the target's own heads, no draft model: only the target verifies
        check_capacity(spec, spec.speculation.k_max, with_draft=False, target_arch=t_info.architecture)
    return target_path, t_info, draft_path, d_info


def check_capacity(spec: EngineSpec, k: int, with_draft: bool, target_arch: str = "") -> None:
    """A verify batch of ``k + 1`` rows fits the target's batch (and the draft's), and a
    target that rolls its recurrent state back from snapshots (:data:`.arch.SNAPSHOT_ROLLBACK`:
    ``k`` of them, one micro-batch) has a micro-batch of ``k + 1`` rows.

    Raises:
        BoundsError: e.g. ``target.n_batch = 512 is out of bounds: must be >= 601``.
    """
    t = spec.target.load
    d = spec.draft.load if spec.draft is not None else t
    draft = ContextCapacity("draft", d.n_batch, d.n_ubatch) if with_draft else None
    snapshots = rollback_kind(target_arch) == "snapshot"
    target = ContextCapacity("target", t.n_batch, t.n_ubatch, snapshots, k if snapshots else 0)
    validate_capacity(target, draft, k)


def load_speculator(
    spec: EngineSpec,
    progress: Progress = _noop,
    cancelled: Callable[[], bool] = _never,
    window: Window | None = None,
    huge_pages: str = "wait",
) -> Speculator:
    """Check, then load the target (and draft) and return a ready :class:`Speculator`.

    The contexts start with a window of :data:`..native.window.INITIAL` tokens where
    :func:`..native.window.grows` (else ``n_ctx``), or ``window``'s for a caller that
    knows its first reply (``skippy-tui run``: its prompt plus ``max_tokens``),
    and grow to ``n_ctx`` as replies need (see :mod:`..native.window`: a smaller window
    makes every step faster; replies are the same).

    ``cancelled`` is polled between stages and, through llama.cpp's progress
    callback, while each model's tensors load (many times a second), so a quit
    during a load is prompt; deriving the default F32 target cannot be stopped
    midway (llama.cpp's quantize has no callback).

    Mapped weights that want huge pages (:mod:`..native.hugepages`) move into them once the
    rest is ready: before this returns (``huge_pages="wait"``, so that a run's or a
    bench's timings are those of huge pages), or on a background thread
    (``"background"``: the app accepts a message meanwhile).

    Raises:
        BoundsError, ModelFileError, IncompatibleModelsError: nothing is left
            allocated when one is raised.
        CancelledError: ``cancelled()`` became true; nothing is left allocated.
        SkippyError: ``window`` could not render the prompt; nothing is left allocated.
    """

    def checkpoint() -> None:
        if cancelled():
            raise CancelledError("model load cancelled")

    notes: list[str] = []

    def load_model(path: Path, params: LoadParams, stage: str, load_mtp: bool = False) -> Model:
        if params.repack:
            progress(f"{stage}: trying CPU weight repacking", 0.0)
            crash = repack_crash(path, params, spec.cache_dir, cancelled)
            checkpoint()
            if crash:
                notes.append(crash)
                params = dataclasses.replace(params, repack=False)
        try:
            return Model(path, params, lambda f: _report(progress, stage, f, cancelled), load_mtp=load_mtp)
        except ModelFileError:
            checkpoint()  # llama.cpp's "could not load" after our callback asked it to stop
            raise

    target_path, t_info, draft_path, d_info = check_spec(spec, progress)
    checkpoint()
    owned: list[Model | Context] = []
    # an MTP drafter file given as the draft (external heads), else the target's own heads
    external = d_info is not None and d_info.mtp_only
    own_heads = spec.heads and t_info.mtp_heads > 0 and not external
    try:
        t_model = load_model(target_path, spec.target.load, f"loading target {t_info.label}", own_heads)
        owned.append(t_model)
        checkpoint()
        template = template_for(t_model, t_info.chat_template, t_info.architecture, spec.target.chat_template)
        t_load = spec.target.load
        d_load = spec.draft.load if spec.draft is not None else t_load
        need = window(t_model, template) if window is not None else INITIAL if grows(t_load) else t_load.n_ctx
        # a one-reply run that will not speculate (`run --no-draft`) needs no room for the probe or
        # a verify batch; the app (window None) may switch speculation on later, so it keeps both
        speculates = window is None or spec.speculation.enabled
        t_window, d_window = (fitted(need, p.n_ctx, p.n_batch, speculates) for p in (t_load, d_load))
        # a target whose recurrent state llama.cpp rolls back keeps a snapshot per proposed token
        n_rs = spec.speculation.k_max if speculates and rollback_kind(t_info.architecture) == "snapshot" else 0
        t_ctx = Context(t_model, dataclasses.replace(t_load, n_ctx=t_window), n_rs_seq=n_rs,
                        hidden=own_heads or external)  # fmt: skip
        owned.append(t_ctx)
        drafter: ModelDrafter | None = None
        heads: Model | None = t_model if own_heads else None
        if draft_path is not None and d_info is not None:
            d_model = load_model(draft_path, d_load, f"loading draft {d_info.label}", external)
            owned.append(d_model)
            checkpoint()
            if external:
                heads = d_model
            else:
                d_ctx = Context(d_model, dataclasses.replace(d_load, n_ctx=d_window))
                owned.append(d_ctx)
                drafter = ModelDrafter(d_model, d_ctx, padded(d_load.n_ctx))
        log = mtp_ctx = None
        if heads is not None:
            if heads.n_embd != t_model.n_embd:
                raise IncompatibleModelsError(
                    f"the MTP drafter {heads.path.name} reads hidden states {heads.n_embd} wide, and the target "
                    f"{t_model.path.name}'s are {t_model.n_embd} wide: it belongs to another model"
                )
            log = HiddenLog(t_ctx.n_embd_hidden)
            mtp_ctx = MtpContext(heads, dataclasses.replace(d_load, n_ctx=d_window), log.rows, t_ctx.n_embd_hidden)
            owned.append(mtp_ctx)
        progress("warming up", 0.0)
        for ctx in (o for o in owned if isinstance(o, Context)):
            ctx.warm_up()
        mtp = None
        if heads is not None and mtp_ctx is not None and log is not None:
            mtp = MtpDrafter(heads, mtp_ctx, t_ctx, log, padded(d_load.n_ctx))  # reads the target's rows from now
        speculation = spec.speculation
        if drafter is not None and (why := _state_refusal(drafter.cache.ctx, "draft")):
            notes.append(why)
            drafter.cache.ctx.close()
            drafter.model.close()
            owned = [o for o in owned if o not in (drafter.model, drafter.cache.ctx)]
            drafter = None
        if speculation.enabled and (
            (speculation.source == "model" and drafter is None and mtp is None)
            or (speculation.source == "mtp" and mtp is None)
        ):
            if speculation.source == "mtp":
                why = mtp_heads_usable(t_info.architecture, t_info.n_nextn) or "no draft was asked for"
                notes.append(f"source mtp: the target {t_info.label} cannot draft with MTP heads ({why})")
            speculation = dataclasses.replace(speculation, enabled=False)
        if no_rollback := _state_refusal(t_ctx, "target"):
            speculation = dataclasses.replace(speculation, enabled=False)
        elif t_ctx.rollback == "restore":
            notes.append(
                f"the target {t_info.label} keeps a recurrent state llama.cpp cannot roll back: a rejected "
                "proposal restores the state saved before its verify and decodes the accepted tokens again"
            )
    except BaseException:
        for obj in reversed(owned):
            obj.close()
        raise
    n_ctx = t_load.n_ctx
    speculator = Speculator(t_model, t_ctx, template, drafter, speculation, t_info, d_info, padded(n_ctx), mtp)
    speculator.no_rollback = no_rollback
    if drafter is not None:
        speculator.draft_settings = numeric_settings(t_load, d_load)
    if speculator.n_ctx != n_ctx:  # llama.cpp pads the KV cache
        notes.append(f"llama.cpp rounded n_ctx {n_ctx} to {speculator.n_ctx} tokens")
    if slow := thread_wait_note():
        notes.append(slow)
    speculator.load_note = "; ".join(notes)
    if spec.speculation.exact:
        rows, load, cache = probe_rows(spec.speculation.k_limit), t_load, spec.cache_dir
        # the context at probe time: the window may have grown into a new one since load
        speculator.exactness_probe = lambda report=None: cached_probe(
            speculator.target_cache.ctx, rows, load, cache, report
        )
        if speculation.enabled:

            def probing(fraction: float) -> None:  # minutes on a busy CPU: show it, and stop on a quit
                progress(PROBE_STAGE, fraction)
                checkpoint()

            try:
                checkpoint()
                speculator.ensure_exact(probing)
                checkpoint()
            except BaseException:
                speculator.close()
                raise
        # else (plain decoding, e.g. --no-draft): nothing will speculate, so the probe
        # waits until something does (a source chosen in the app), if ever
    models = [m for m in dict.fromkeys((t_model, drafter.model if drafter is not None else None, heads)) if m]
    if any(m.huge_pages.pending for m in models):
        mover = threading.Thread(target=_move_to_huge_pages, args=(models,), name="huge-pages", daemon=True)
        mover.start()
        if huge_pages == "wait":
            progress("moving weights into huge pages", 0.0)
            try:
                mover.join()
            except BaseException:  # Ctrl+C: the models stop the move as they close
                speculator.close()
                raise
    progress("ready", 1.0)
    return speculator


def _move_to_huge_pages(models: list[Model]) -> None:
    # nice 19: in the app a reply may start while the move runs, and its decode threads
    # meet at a barrier after every operation, so a move at their priority would stall
    # both; at 19 it takes what the decode leaves
    lower_threads((threading.get_native_id(),), 19)
    for model in models:  # one at a time: a 2-core machine has one core to spare at most
        model.huge_pages.move()


def _state_refusal(ctx: Context, role: str) -> str:
    """Why a model that rolls back by restoring a saved state cannot speculate (its state is
    over the bound a saved state may have), or ``""``."""
    if ctx.rollback != "restore":
        return ""
    try:
        ctx.prefill([0], 0)  # an empty sequence's state holds no cell: size one that holds a token
        ctx.capture()
    except StateError as e:
        return f"the {role}'s rejected tokens could only leave by a saved state: {e}, so speculation is off"
    finally:
        ctx.clear()
    return ""


def _report(progress: Progress, stage: str, fraction: float, cancelled: Callable[[], bool]) -> bool:
    """llama.cpp's load progress callback: report, and return False to stop the load."""
    progress(stage, fraction)
    return not cancelled()
