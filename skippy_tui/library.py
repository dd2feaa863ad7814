"""The model library: every GGUF model in a few folders, described from its header.

:func:`scan` walks the folders (``[library] dirs``, or the usual download
places: the Hugging Face hub cache, LM Studio's models folder, llama.cpp's
download cache, ``~/models``), groups the shards of a split model into one
entry and describes each from its GGUF header — never loading weights. A file
that cannot be read is listed as broken, with the reason; nothing raises.

Headers are cached twice over, both keyed by (path, size, mtime), so a second
scan reads no model file: the engine's header cache (``gguf-info``, the full
:class:`ModelInfo` with its vocabulary, shared with model loading) and a small
entry cache here (``library``), which also remembers why a file was broken.

:func:`draft_candidates` is the compatibility filter for a given target (the
engine's vocabulary check). No UI imports: the app's model picker and the
``models`` / ``drafts`` commands both build on this module.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .cli_common import path_arg
from .engine.errors import ModelFileError
from .engine.jsoncache import file_key, read_entry, write_entry
from .engine.load.arch import mtp_heads_usable
from .engine.load.compat import incompatibility
from .engine.load.gguf_info import ModelInfo, cached_model_info, shard_paths
from .engine.load.labels import SHARD_RE, model_label

ENTRY_VERSION = 2
"""Bumped when :class:`LibraryEntry`'s cached fields change (old entries are then re-read;
2: ``memory``, ``mtp_heads``, ``mtp_drafter``)."""
LABEL_WIDTH = 40
"""How long a model's label may be (``models``, ``drafts`` and F8 name a model alike)."""


@dataclass(frozen=True)
class LibraryEntry:
    """One model of the library (a split model is one entry), or one broken file.

    ``path``: the file as found in the folder (for a split model its first shard;
    symlinks are kept, so a Hugging Face snapshot shows its file name, not the
    blob's hash). ``shards``: every file of the model. ``size_bytes``: their
    total. ``n_params``: parameters (elements of all tensors). ``quantization``:
    the GGUF file type (``Q4_K_M``, ``F32``, …). ``n_ctx_train``: the context
    length it was trained for (tokens). ``vocab``: e.g. ``"BPE 49152"``.
    ``memory``: ``attention``, ``hybrid`` or ``recurrent`` (from the architecture).
    ``mtp_heads``: multi-token-prediction heads the pinned llama.cpp can draft with
    (0: none, or ones it cannot run). ``mtp_drafter``: the file holds MTP blocks
    alone (an external drafter for its target, never a model of its own).
    ``error``: why the file is unusable (``None`` for a usable model); then only
    ``path``, ``shards`` and ``name`` (the file stem) are meaningful.
    """

    path: Path
    shards: tuple[Path, ...]
    name: str
    architecture: str = ""
    n_params: int | None = None
    quantization: str = ""
    size_bytes: int = 0
    n_ctx_train: int | None = None
    has_template: bool = False
    vocab: str = ""
    memory: str = "attention"
    mtp_heads: int = 0
    mtp_drafter: bool = False
    error: str | None = None

    @property
    def broken(self) -> bool:
        return self.error is not None

    @property
    def notes(self) -> str:
        """What sets the model apart for speculation: ``hybrid``, ``recurrent``,
        ``MTP heads: 1``, ``MTP drafter`` (comma-separated); ``""`` for a plain attention model."""
        if self.mtp_drafter:  # its memory is its MTP block's: the arch's trunk is not in the file
            return "MTP drafter"
        parts = [self.memory] if self.memory != "attention" else []
        if self.mtp_heads:
            parts.append(f"MTP heads: {self.mtp_heads}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (paths as strings)."""
        d = asdict(self)
        d["path"] = str(self.path)
        d["shards"] = [str(s) for s in self.shards]
        return d

    @classmethod
    def from_info(cls, path: Path, shards: tuple[Path, ...], info: ModelInfo) -> LibraryEntry:
        """The entry of a readable model found at ``path`` (``info`` may have been cached
        under another name of the same file, so the paths are the caller's)."""
        return cls(
            path=path,
            shards=shards,
            name=info.name,
            architecture=info.architecture,
            n_params=info.n_params,
            quantization=info.file_type,
            size_bytes=info.size_bytes,
            n_ctx_train=info.context_length,
            has_template=bool(info.chat_template),
            vocab=f"{info.vocab_kind} {info.vocab_size}",
            memory=info.memory,
            mtp_heads=info.mtp_heads,
            mtp_drafter=info.mtp_only,
        )


@dataclass(frozen=True)
class DraftCandidate:
    """A way to draft for one target: ``why_not`` is ``None`` when the pair can
    speculate, else the reason (one sentence).

    ``entry``: the draft model's file, an MTP drafter file, or (``integrated``) the
    target itself, whose own MTP heads draft.
    """

    entry: LibraryEntry
    why_not: str | None
    integrated: bool = False

    @property
    def compatible(self) -> bool:
        return self.why_not is None

    @property
    def mtp(self) -> bool:
        """Drafts with MTP heads (the target's own, or an MTP drafter file's): ``source = "mtp"``.
        Such a file is never loaded as a draft model of its own (llama.cpp cannot run it so)."""
        return self.integrated or self.entry.mtp_drafter

    @property
    def name(self) -> str:
        """``integrated MTP`` for the target's own heads, else the file's label (:func:`entry_label`)."""
        return INTEGRATED_MTP if self.integrated else entry_label(self.entry)


INTEGRATED_MTP = "integrated MTP"
"""How the finder and the picker name a target's own MTP heads as a draft."""


# -- where models live -----------------------------------------------------------------


def default_dirs(env: dict[str, str] | None = None, home: Path | None = None) -> list[Path]:
    """The usual download folders, existing or not, in this order: the Hugging Face hub
    cache (``HF_HUB_CACHE``, ``HF_HOME/hub``, ``~/.cache/huggingface/hub``), LM Studio's
    models folders (``~/.lmstudio/models``, the older ``~/.cache/lm-studio/models``),
    llama.cpp's download cache (``LLAMA_CACHE``, else ``~/.cache/llama.cpp``, or
    ``~/Library/Caches/llama.cpp`` on macOS) and ``~/models``."""
    env = dict(os.environ) if env is None else env
    home = Path.home() if home is None else home
    xdg_cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home / ".cache"
    if env.get("HF_HUB_CACHE"):
        hf = Path(env["HF_HUB_CACHE"])
    elif env.get("HF_HOME"):
        hf = Path(env["HF_HOME"]) / "hub"
    else:
        hf = xdg_cache / "huggingface" / "hub"
    if env.get("LLAMA_CACHE"):
        llama = Path(env["LLAMA_CACHE"])
    elif sys.platform == "darwin":
        llama = home / "Library" / "Caches" / "llama.cpp"
    else:
        llama = xdg_cache / "llama.cpp"
    found = [hf, home / ".lmstudio" / "models", xdg_cache / "lm-studio" / "models", llama, home / "models"]
    return [p.expanduser() for p in found]


def library_dirs(configured: Sequence[str | Path] = ()) -> list[Path]:
    """``configured`` (``[library] dirs`` or ``--dir``) when given, else :func:`default_dirs`;
    each ``~``-expanded. Whether they exist is the caller's question (see :func:`existing`)."""
    if configured:
        return [Path(d).expanduser() for d in configured]
    return default_dirs()


def existing(dirs: Iterable[Path]) -> list[Path]:
    """The folders of ``dirs`` that exist, each once (a folder reached twice through links too)."""
    out, seen = [], set()
    for d in dirs:
        if d.is_dir():
            real = os.path.realpath(d)
            if real not in seen:
                seen.add(real)
                out.append(d)
    return out


def check_folder(typed: str) -> tuple[str | None, Path]:
    """A folder the user typed to add to the library: ``(None, its absolute path)``, or
    ``(why not, path)`` for an empty entry, a missing path, a file or an unreadable folder."""
    text = typed.strip()
    path = Path(os.path.abspath(Path(text).expanduser())) if text else Path()
    if not text:
        return "Type the path of a folder of GGUF files (e.g. ~/models).", path
    if not path.exists():
        return f"No such folder: {text}", path
    if not path.is_dir():
        return f"{text} is a file, not a folder: type the folder it is in.", path
    if not os.access(path, os.R_OK | os.X_OK):
        return f"Cannot read {text} (permission denied).", path
    return None, path


# -- the scan --------------------------------------------------------------------------


def find_models(dirs: Iterable[Path]) -> list[tuple[Path, tuple[Path, ...], str | None]]:
    """Every model file under ``dirs`` (recursively, following folder links once):
    ``(path, shards, problem)`` with ``problem`` ``None`` or why the group is broken
    before any file is read (a missing shard, a folder named ``*.gguf``).

    A file reached twice (through a symlink, a folder listed twice) is kept once,
    at the first place found; folders are walked in sorted order, so that is stable.
    """
    found: list[tuple[Path, tuple[Path, ...], str | None]] = []
    seen_files: set[str] = set()
    seen_dirs: set[str] = set()

    def add(path: Path, shards: tuple[Path, ...], problem: str | None) -> None:
        real = os.path.realpath(path)
        if real not in seen_files:
            seen_files.add(real)
            found.append((path, shards, problem))

    for top in dirs:
        for root, dirnames, filenames in os.walk(top, followlinks=True):
            real_root = os.path.realpath(root)
            if real_root in seen_dirs:  # a link loop, or a folder reached twice
                dirnames[:] = []
                continue
            seen_dirs.add(real_root)
            dirnames.sort()
            here = Path(root)
            for d in dirnames:
                if d.lower().endswith(".gguf"):
                    add(here / d, (here / d,), "a folder, not a GGUF file")
            for f in sorted(filenames):
                if not f.lower().endswith(".gguf"):
                    continue
                path = here / f
                m = SHARD_RE.match(f)
                if m is None:
                    add(path, (path,), None)
                    continue
                first = path.with_name(f"{m['stem']}-00001-of-{m['count']}.gguf")
                if path != first:
                    if not first.exists():  # else the group is listed at its first shard
                        add(path, (path,), f"split model: its first shard {first.name} is missing")
                    continue
                try:
                    add(path, shard_paths(path), None)
                except ModelFileError as e:
                    add(path, (path,), str(e))
    return found


def describe(path: Path, shards: tuple[Path, ...], cache_dir: Path | None) -> LibraryEntry:
    """One model's entry, from the entry cache or its header; never raises.

    ``cache_dir``: the app's cache root (``library/`` and ``gguf-info/`` under it),
    or ``None`` to read every header.
    """
    stem = path.name.removesuffix(".gguf")
    try:
        key = file_key(path, *(file_key(s) for s in shards[1:]), ENTRY_VERSION)
    except OSError as e:  # a dangling link, a file gone since the walk, a folder we cannot stat
        why = "dangling symlink to " + os.readlink(path) if path.is_symlink() and not path.exists() else e.strerror
        return LibraryEntry(path, shards, stem, error=str(why or e))
    if not os.access(path, os.R_OK):  # not cached: a chmod changes no mtime, so the reason would stick
        return LibraryEntry(path, shards, stem, error="permission denied (not readable)")
    entry_file = cache_dir / "library" / f"{key}.json" if cache_dir is not None else None
    if entry_file is not None:
        cached = _from_cache(read_entry(entry_file), path, shards)
        if cached is not None:
            return cached
    try:
        info = cached_model_info(path, cache_dir / "gguf-info" if cache_dir is not None else None)
        entry = LibraryEntry.from_info(path, shards, info)
    except ModelFileError as e:
        entry = LibraryEntry(path, shards, stem, error=str(e))
    except Exception as e:  # the gguf reader on a damaged file: one bad file must not stop a scan
        entry = LibraryEntry(path, shards, stem, error=f"unreadable GGUF ({type(e).__name__}: {e})")
    if entry_file is not None:
        write_entry(entry_file, entry.to_dict())
    return entry


def _from_cache(data: Any, path: Path, shards: tuple[Path, ...]) -> LibraryEntry | None:
    if not isinstance(data, dict):
        return None
    try:
        # the key is the resolved file: the same file found under another link name keeps that name
        fields = {k: data[k] for k in LibraryEntry.__dataclass_fields__ if k not in ("path", "shards")}
        return LibraryEntry(path=path, shards=shards, **fields)
    except (KeyError, TypeError):
        return None


def scan(
    dirs: Iterable[Path],
    cache_dir: Path | None,
    on_read: Callable[[Path], None] | None = None,
) -> list[LibraryEntry]:
    """Every model under ``dirs`` (missing folders are skipped), usable ones first by
    name, then broken ones by path. Never raises for a bad file.

    ``on_read(path)`` is called before a header that is not cached is read (a
    first scan of a large vocabulary takes seconds), e.g. for progress.
    """
    entries = []
    for path, shards, problem in find_models(existing(dirs)):
        if problem is not None:
            entries.append(LibraryEntry(path, shards, path.name.removesuffix(".gguf"), error=problem))
            continue
        if on_read is not None and not _cached(path, shards, cache_dir):
            on_read(path)
        entries.append(describe(path, shards, cache_dir))
    return sorted(entries, key=lambda e: (e.broken, e.name.lower() if not e.broken else "", str(e.path)))


def _cached(path: Path, shards: tuple[Path, ...], cache_dir: Path | None) -> bool:
    if cache_dir is None:
        return False
    try:
        key = file_key(path, *(file_key(s) for s in shards[1:]), ENTRY_VERSION)
    except OSError:
        return True  # nothing will be read
    return (cache_dir / "library" / f"{key}.json").is_file()


# -- drafts for a target -----------------------------------------------------------------


def draft_candidates(
    target: ModelInfo, entries: Iterable[LibraryEntry], cache_dir: Path | None
) -> list[DraftCandidate]:
    """Every way to draft for ``target``: its own MTP heads (when the file has any), then
    every usable entry (the target's own file left out); compatible ones first, the
    target's heads first among them, then by size (smallest first).

    Broken entries are left out. The vocabulary check needs each entry's token
    list, read from the header cache (``cache_dir/gguf-info``). An MTP drafter file
    also needs the target's architecture and heads llama.cpp can run. An MTP drafter
    file as the target has no draft (it is no model of its own).
    """
    if target.mtp_only:
        return []
    out = []
    if target.n_nextn > 0:
        own = LibraryEntry.from_info(target.path, target.shards, target)
        out.append(DraftCandidate(own, mtp_heads_usable(target.architecture, target.n_nextn) or None, True))
    target_real = {os.path.realpath(s) for s in target.shards}
    for e in entries:
        if e.broken or os.path.realpath(e.path) in target_real:
            continue
        try:
            info = cached_model_info(e.path, cache_dir / "gguf-info" if cache_dir is not None else None)
        except ModelFileError as err:  # changed since the scan
            out.append(DraftCandidate(e, str(err)))
            continue
        out.append(DraftCandidate(e, incompatibility(target, info) or _mtp_drafter_refusal(target, info)))
    return sorted(out, key=lambda c: (not c.compatible, not c.integrated, c.entry.size_bytes, str(c.entry.path)))


def _mtp_drafter_refusal(target: ModelInfo, draft: ModelInfo) -> str | None:
    """Why the MTP drafter file ``draft`` cannot draft for ``target`` with the pinned llama.cpp
    (``None``: it can, or it is an ordinary model); its architecture is checked with the
    vocabulary (:func:`.engine.load.compat.incompatibility`), its width when both load."""
    why = mtp_heads_usable(draft.architecture, draft.n_nextn) if draft.mtp_only else ""
    return f"MTP drafter: {why}" if why else None


# -- formatting ------------------------------------------------------------------------


def entry_label(e: LibraryEntry, width: int = LABEL_WIDTH) -> str:
    """The model's label: file stem and quantization, as F8, the status bar and ``models``
    name it (``SmolLM2-135M-Instruct Q4_1``; the GGUF's own name is often a training run's)."""
    return model_label(e.path, e.name, e.quantization, width)


def human_params(n: int | None) -> str:
    """``134515008`` → ``135M``; ``None`` → ``?``."""
    if not n:
        return "?"
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            v = n / scale
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return str(n)


def human_size(n: int) -> str:
    """Bytes in binary units: ``98362432`` → ``93.8 MiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover


def table(rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
    """Rows as aligned columns (the first row is the header); columns in ``right`` right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def render_entries(entries: Sequence[LibraryEntry]) -> str:
    """The ``models`` table: usable models (named by :func:`entry_label`), then broken files
    with their reasons."""
    good = [e for e in entries if not e.broken]
    broken = [e for e in entries if e.broken]
    parts = []
    if good:
        rows = [["NAME", "ARCH", "PARAMS", "QUANT", "SIZE", "N_CTX_TRAIN", "TEMPLATE", "NOTES", "PATH"]]
        for e in good:
            rows.append(
                [
                    entry_label(e),
                    e.architecture,
                    human_params(e.n_params),
                    e.quantization,
                    human_size(e.size_bytes),
                    str(e.n_ctx_train) if e.n_ctx_train else "?",
                    "yes" if e.has_template else "no",
                    e.notes,
                    str(e.path) + (f" (+{len(e.shards) - 1} shards)" if len(e.shards) > 1 else ""),
                ]
            )
        parts.append(table(rows, right=(2, 4, 5)))
    if broken:
        parts.append(f"{len(broken)} broken:\n" + "\n".join(f"  {e.path}: {e.error}" for e in broken))
    if not parts:
        return "no GGUF models found"
    return "\n\n".join(parts)


# -- the `models` command ----------------------------------------------------------------


def add_library_args(p: argparse.ArgumentParser) -> None:
    """``--config`` and ``--dir`` (shared by ``models`` and ``drafts``)."""
    p.add_argument("--config", type=path_arg, metavar="PATH", default=argparse.SUPPRESS, help="config file")
    p.add_argument(
        "--dir", dest="dirs", action="append", type=path_arg, metavar="D", default=None,
        help="folder to scan (repeatable; replaces [library] dirs and the default folders)",
    )  # fmt: skip


def add_models_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``skippy-tui models``."""
    p = sub.add_parser("models", help="list the GGUF models in the library folders")
    add_library_args(p)
    p.add_argument("--json", action="store_true", default=False, help="the entries as JSON on stdout")
    p.set_defaults(func=cmd_models)
    return p


def scan_for_args(args: argparse.Namespace) -> tuple[list[Path], list[LibraryEntry]] | None:
    """The folders (``--dir``, else the config's, else the defaults) and their entries;
    ``None`` after a one-line note on stderr when none of the folders exists.

    Raises:
        ConfigError: a ``--dir`` is not a folder, or the config file is unreadable or
            holds a bad value.
    """
    from .config import ConfigError, cache_dir, load_config

    for d in args.dirs or ():
        # a folder asked for by name is a typo when missing (the defaults and the config's may be absent)
        if not (full := d.expanduser()).is_dir():
            raise ConfigError(f"--dir {d}: {'not a folder' if full.exists() else 'no such folder'}", "--dir")
    cfg = load_config(getattr(args, "config", None))
    dirs = library_dirs(args.dirs or cfg.get("library", "dirs"))
    found = existing(dirs)
    if not found:
        where = ", ".join(str(d) for d in dirs)
        sys.stderr.write(
            f"skippy-tui: no model folders found (looked in {where}); set [library] dirs or pass --dir"
            " (the built-in SmolLM2 pair needs none: skippy-tui starts on it)\n"
        )
        return None

    def reading(path: Path) -> None:
        sys.stderr.write(f"reading {path.name}\n")

    return found, scan(found, cache_dir(), on_read=reading)


def cmd_models(args: argparse.Namespace) -> int:
    """``skippy-tui models``: the table (or ``--json``); exit 0, also when nothing is found
    (2 when a ``--dir`` is not a folder)."""
    result = scan_for_args(args)
    if result is None:
        if args.json:
            sys.stdout.write(json.dumps({"dirs": [], "models": []}) + "\n")
        return 0
    dirs, entries = result
    if args.json:
        models = [{**e.to_dict(), "label": entry_label(e)} for e in entries]
        doc = {"dirs": [str(d) for d in dirs], "models": models}
        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render_entries(entries) + "\n")
    return 0
