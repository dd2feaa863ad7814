"""Every setting, declared once: its config key, default, type, bounds and command-line flag.

The config file's schema and type checks (:mod:`skippy_tui.config`), the command-line
flags (:mod:`skippy_tui.cli_common`), the engine's settings dataclasses (their
defaults and bounds: :mod:`.settings`, :mod:`.sampling.params`, :class:`.native.model.LoadParams`)
and ``config.example.toml`` (a test keeps it in step) all read :data:`OPTIONS`, so a
default or a bound cannot differ between them.

A model key (``[target]``) is also a ``[draft]`` key whose default is "the target's"
(``None``); the draft's own defaults over the target's are :data:`.settings.DRAFT_LOAD`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["int", "float", "bool", "str", "path", "word", "int|word", "bool|auto", "list[str]", "list[float]"]

FlagAction = Literal["store", "append", "store_false"]


@dataclass(frozen=True, slots=True)
class Option:
    """One setting.

    ``kind``: ``word`` takes one of ``words``; ``int|word`` an integer or ``words[0]``
    (``n_draft = "auto"``); ``bool|auto`` true, false or ``"auto"``. ``lo``/``hi``: the
    bounds of a number (None: open); ``lo_open``: ``lo`` itself is out. ``flag``: its
    command-line flag (``--n-draft``), None when it has none; ``action``: ``append``
    for a repeatable flag, ``store_false`` for a flag that turns it off (``--no-draft``).
    """

    section: str
    key: str
    default: Any
    kind: Kind
    help: str = ""
    words: tuple[str, ...] = ()
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    flag: str | None = None
    action: FlagAction = "store"
    metavar: str | None = None

    @property
    def name(self) -> str:
        """``section.key``."""
        return f"{self.section}.{self.key}"


KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
SPLIT_MODES = ("none", "layer", "row")
FLASH_ATTN = ("auto", "on", "off")
DRAFT_SOURCES = ("auto", "model", "ngram", "ngram+model", "mtp")
PROFILES = ("auto", "exact", "fast")
SAMPLERS = ("coupled", "rejection")
MAX_DRAFT_TOKENS = 4096
MAX_SEED = 2**63 - 1
MAX_TOKENS = 1_048_576


def _model(key: str, default: Any, kind: Kind, help: str = "", **kw: Any) -> Option:
    return Option("target", key, default, kind, help, **kw)


MODEL_OPTIONS: tuple[Option, ...] = (
    _model("n_ctx", 4096, "int", "context window (tokens; run sizes it to the prompt + --max-tokens, up to this)",
           lo=16, hi=1 << 24, flag="--n-ctx", metavar="N"),
    _model("n_batch", 512, "int", "tokens one decode call may hold", lo=1, hi=1 << 20),
    _model("n_ubatch", 512, "int", "tokens one micro-batch holds", lo=1, hi=1 << 20),
    _model("threads", 0, "int", "CPU threads (0: one per usable CPU)", lo=0, hi=1024),
    _model("threads_batch", 0, "int", "CPU threads for batches (0: as threads)", lo=0, hi=1024),
    _model("n_gpu_layers", -1, "int", "layers to offload (-1 = all)", lo=-1, hi=1 << 16, flag="--n-gpu-layers",
           metavar="N"),
    _model("main_gpu", 0, "int", "the GPU of split_mode none", lo=0, hi=1024),
    _model("split_mode", "layer", "word", "how layers spread over devices", words=SPLIT_MODES),
    _model("device", "", "str", "backend device, e.g. CUDA0", flag="--device", metavar="NAME"),
    _model("flash_attn", "off", "word", "flash attention", words=FLASH_ATTN),
    _model("mmap", True, "bool", "map the file instead of reading it"),
    _model("mlock", False, "bool", "lock the weights in RAM"),
    _model("cache_type_k", "f16", "word", "KV cache type of K", words=KV_CACHE_TYPES),
    _model("cache_type_v", "f16", "word", "KV cache type of V", words=KV_CACHE_TYPES),
    _model("swa_full", False, "bool", "a full-size sliding-window cache"),
    _model("repack", False, "bool", "CPU weight repacking"),
    _model("rpc", [], "list[str]", "llama.cpp rpc-server whose devices hold the layers (repeatable; the draft "
           "inherits)", flag="--rpc", action="append", metavar="HOST:PORT"),
    _model("tensor_split", [], "list[float]", "share of layers (or rows) per device"),
    _model("hugepages", "auto", "bool|auto", "weights in transparent huge pages"),
)  # fmt: skip
"""The native settings of one model (:class:`.native.model.LoadParams`, field for field)."""

OPTIONS: tuple[Option, ...] = (
    Option("target", "path", "", "path", "target model GGUF", flag="--target", metavar="PATH"),
    Option("target", "chat_template", "", "str", "a llama.cpp built-in template name or Jinja text"),
    *MODEL_OPTIONS,
    Option("draft", "path", "", "path", "draft model GGUF", flag="--draft", metavar="PATH"),
    Option("draft", "enabled", True, "bool", "plain decoding, no draft model", flag="--no-draft", action="store_false"),
    Option("draft", "like_target", False, "bool", "load the draft with the target's numeric settings"),
    *(Option("draft", o.key, None, o.kind, o.help, o.words, o.lo, o.hi, o.lo_open) for o in MODEL_OPTIONS),
    Option("speculation", "enabled", True, "bool", "speculate (F4 turns it on and off)"),
    Option("speculation", "n_draft", "auto", "int|word", 'tokens per proposal (k), or "auto"', words=("auto",),
           lo=1, hi=MAX_DRAFT_TOKENS, flag="--n-draft", metavar="K"),
    Option("speculation", "n_draft_max", 8, "int", "the largest k auto picks for a model", lo=1, hi=MAX_DRAFT_TOKENS),
    Option("speculation", "n_draft_max_ngram", 32, "int", "the longest n-gram proposal auto makes", lo=1,
           hi=MAX_DRAFT_TOKENS),
    Option("speculation", "n_min", 0, "int", "fewest proposed tokens worth verifying", lo=0, hi=MAX_DRAFT_TOKENS,
           flag="--n-min", metavar="N"),
    Option("speculation", "p_min", 0.0, "float", "stop drafting below this draft probability", lo=0.0, hi=1.0,
           flag="--p-min", metavar="P"),
    Option("speculation", "source", "auto", "word", "what proposes: auto (per step, with --n-draft auto), the draft "
           "model, n-gram lookup, the target's MTP heads", words=DRAFT_SOURCES, flag="--draft-source"),
    Option("speculation", "exact", True, "bool", "verify in batches proven bit-identical to plain decoding"),
    Option("speculation", "profile", "auto", "word", "auto (exact where the build certifies verify batches of 2 "
           "rows or more, else one batch, not bit-exact), exact (batches proven bit-identical to plain decoding, row "
           "by row if need be) or fast (flash attention and repacking on, one verify batch: faster, replies may "
           "differ from plain)", words=PROFILES, flag="--profile"),
    Option("sampling", "temperature", 0.0, "float", "0 = greedy", lo=0.0, hi=100.0, flag="--temperature",
           metavar="T"),
    Option("sampling", "top_k", 40, "int", "0 = off", lo=0, flag="--top-k", metavar="K"),
    Option("sampling", "top_p", 0.95, "float", "1.0 = off", lo=0.0, hi=1.0, flag="--top-p", metavar="P"),
    Option("sampling", "min_p", 0.05, "float", "0.0 = off", lo=0.0, hi=1.0, flag="--min-p", metavar="P"),
    Option("sampling", "seed", "random", "int|word", 'random seed, or "random" (a new one per reply)',
           words=("random",), lo=0, hi=MAX_SEED, flag="--seed", metavar="S"),
    Option("sampling", "sampler", "coupled", "word", "speculative sampling: coupled (= plain sampling with the same "
           "seed) or rejection", words=SAMPLERS, flag="--sampler"),
    Option("sampling", "repeat_penalty", 1.0, "float", "1.0 = off", lo=0.0, hi=100.0, lo_open=True,
           flag="--repeat-penalty", metavar="P"),
    Option("sampling", "repeat_last_n", 64, "int", "tokens the penalties look back (-1 = all)", lo=-1, hi=1 << 24,
           flag="--repeat-last-n", metavar="N"),
    Option("sampling", "presence_penalty", 0.0, "float", "0.0 = off", lo=-100.0, hi=100.0,
           flag="--presence-penalty", metavar="P"),
    Option("sampling", "frequency_penalty", 0.0, "float", "0.0 = off", lo=-100.0, hi=100.0,
           flag="--frequency-penalty", metavar="P"),
    Option("generation", "max_tokens", 512, "int", "reply length cap", lo=1, hi=MAX_TOKENS, flag="--max-tokens",
           metavar="N"),
    Option("generation", "stop", [], "list[str]", "stop string (repeatable)", flag="--stop", action="append",
           metavar="STR"),
    Option("generation", "system_prompt", "", "str", "system prompt", flag="--system", metavar="TEXT"),
    Option("library", "dirs", [], "list[str]", "folders the model library scans"),
    Option("ui", "theme", "skippy-dark", "str", "the app's theme"),
    Option("ui", "color_origin", False, "bool", "colour replies by origin"),
    Option("ui", "autosave", False, "bool", "save each reply's transcript"),
    Option("ui", "transcript_dir", "", "str", "where transcripts are saved"),
    Option("ui", "yield_cpu", False, "bool", "Linux: the UI at nice 19 (faster when idle, slow keys under load)"),
    Option("ui", "history", True, "bool", "keep a chat history"),
    Option("ui", "engine", "process", "word", "the engine in its own process or a thread", words=("process", "thread")),
)  # fmt: skip

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}


def option(name: str) -> Option:
    """The option ``section.key`` (``"speculation.n_draft"``)."""
    return BY_NAME[name]


def default(name: str) -> Any:
    """The default of ``section.key`` (a list default is a fresh copy)."""
    d = BY_NAME[name].default
    return list(d) if isinstance(d, list) else d


def bounds(name: str) -> tuple[Any, Any]:
    """``(lo, hi)`` of a number option (None: open on that side)."""
    o = BY_NAME[name]
    return o.lo, o.hi


def words(name: str) -> tuple[str, ...]:
    """The words a ``word`` option takes."""
    return BY_NAME[name].words


def schema() -> dict[str, dict[str, Any]]:
    """``{section: {key: default}}``, every option, in declaration order."""
    out: dict[str, dict[str, Any]] = {}
    for o in OPTIONS:
        out.setdefault(o.section, {})[o.key] = default(o.name)
    return out
