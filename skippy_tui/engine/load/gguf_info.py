"""Model facts read from GGUF headers with the ``gguf`` package, before any load.

Reading the header is cheap next to loading weights, so every check that can
refuse a model (missing file, not GGUF, incompatible vocabulary) runs on this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ModelFileError
from .arch import memory_kind, mtp_heads_usable
from .labels import SHARD_RE, model_label

_BLOCK_RE = re.compile(r"^blk\.(\d+)\.")

CACHE_VERSION = 3
"""Part of the header cache's key: bumped when :class:`ModelInfo` gains a field (2: ``n_params``,
3: ``n_nextn``, ``mtp_only``),
so entries of an older version are never read (nor overwritten by it, where both run)."""

# llama.cpp's tokenizer.ggml.model values and the vocab kinds they stand for
VOCAB_KINDS = {"llama": "SPM", "gpt2": "BPE", "bert": "WPM", "t5": "UGM", "rwkv": "RWKV", "plamo2": "PLaMo2"}


@dataclass(frozen=True)
class ModelInfo:
    """What one GGUF model is, from its header(s).

    ``n_layer`` is counted from ``blk.N.*`` tensor names across every shard of a
    split model, ``n_params`` is the element count of all its tensors (``None``
    only where a caller built the object without it). ``tokens`` are the
    vocabulary's token texts by id. Special ids are ``None`` when the file does
    not set them. Sizes are in bytes.
    """

    path: Path
    shards: tuple[Path, ...]
    name: str
    architecture: str
    file_type: str
    n_layer: int
    vocab_model: str
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    add_bos: bool
    chat_template: str | None
    context_length: int | None
    size_bytes: int
    tokens: tuple[str, ...] = field(repr=False)
    n_params: int | None = None
    n_nextn: int = 0
    mtp_only: bool = False

    @property
    def memory(self) -> str:
        """``attention``, ``hybrid`` or ``recurrent`` (:func:`.arch.memory_kind`)."""
        return memory_kind(self.architecture)

    @property
    def mtp_heads(self) -> int:
        """MTP heads that can draft with the pinned llama.cpp (0: none, or unusable)."""
        return 0 if mtp_heads_usable(self.architecture, self.n_nextn) else self.n_nextn

    @property
    def label(self) -> str:
        """The file's stem and quantization (:func:`labels.model_label`), as every view names it."""
        return model_label(self.path, self.name, self.file_type)

    @property
    def vocab_kind(self) -> str:
        """``BPE``, ``SPM``, … (the raw ``tokenizer.ggml.model`` if unknown)."""
        return VOCAB_KINDS.get(self.vocab_model, self.vocab_model)

    def summary(self) -> dict[str, Any]:
        """JSON-ready metadata (no token list), for transcripts and status lines."""
        return {
            "path": str(self.path),
            "name": self.name,
            "architecture": self.architecture,
            "file_type": self.file_type,
            "n_layer": self.n_layer,
            "vocab": f"{self.vocab_kind} {self.vocab_size}",
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "eot_id": self.eot_id,
            "context_length": self.context_length,
            "size_bytes": self.size_bytes,
            "n_params": self.n_params,
            "shards": len(self.shards),
            "memory": self.memory,
            "n_nextn": self.n_nextn,
            "mtp_only": self.mtp_only,
        }


def shard_paths(path: Path) -> tuple[Path, ...]:
    """All shards of a split model (``name-0000N-of-0000M.gguf``), or ``(path,)``.

    Raises:
        ModelFileError: when a shard named by the split pattern is missing.
    """
    m = SHARD_RE.match(path.name)
    if not m:
        return (path,)
    count = int(m["count"])
    shards = tuple(path.with_name(f"{m['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1))
    for s in shards:
        if not s.is_file():
            raise ModelFileError(f"split model {path.name}: shard {s.name} is missing")
    return shards


def _field(reader: Any, key: str) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return None
    value = f.contents()
    return value


def _file_type_name(code: int | None) -> str:
    if code is None:
        return "unknown"
    try:
        from gguf import LlamaFileType

        return LlamaFileType(code).name.removeprefix("MOSTLY_").replace("ALL_", "")
    except ValueError:
        return f"type {code}"


# the gguf reader's own refusals (a newer version, an unknown value type, …) say what is wrong;
# any other error comes from numpy slicing past the file's end: a truncated or corrupt file
_READER_OWN = (
    "Sorry, file appears", "Unknown/unhandled", "Found duplicated", "Duplicate ", "Bad type", "Invalid alignment",
)  # fmt: skip


def _unreadable(path: Path, error: Exception) -> str:
    """One line for a GGUF file the reader failed on, without numpy's internals."""
    text = str(error.args[0]) if error.args else str(error)
    if text.startswith(_READER_OWN):
        return f"corrupt or unsupported GGUF file {path}: {text}"
    size = path.stat().st_size
    return f"truncated or corrupt GGUF file {path}: its header describes data past its {size:,} bytes"


def check_model_path(path: str | Path) -> Path:
    """``path`` expanded, once it names a file.

    Raises:
        ModelFileError: the path is missing or not a file.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelFileError(f"model file not found: {p}")
    if not p.is_file():
        raise ModelFileError(f"model path is not a file: {p}")
    return p


def read_model_info(path: str | Path) -> ModelInfo:
    """Read a model's header (and its shards' tensor names) without loading weights.

    Raises:
        ModelFileError: the path is missing, not a file, unreadable, not GGUF,
            or lacks the metadata a chat model needs (architecture, tokens).
    """
    from gguf import GGUFReader

    p = check_model_path(path)
    try:
        with p.open("rb") as fh:
            magic = fh.read(4)
    except OSError as e:
        raise ModelFileError(f"cannot read model file {p}: {e.strerror or e}") from e
    if magic != b"GGUF":
        raise ModelFileError(f"not a GGUF file (bad magic {magic!r}): {p}")
    shards = shard_paths(p)
    try:
        reader = GGUFReader(p, "r")
        arch = _field(reader, "general.architecture")
        tokens = _field(reader, "tokenizer.ggml.tokens")
        max_block = -1
        n_params = 0
        trunk = False  # a block-0 tensor: an MTP sidecar holds only the NextN blocks
        for shard in shards:
            r = reader if shard == p else GGUFReader(shard, "r")
            for t in r.tensors:
                n_params += int(t.n_elements)
                trunk = trunk or t.name.startswith("blk.0.")
                bm = _BLOCK_RE.match(t.name)
                if bm:
                    max_block = max(max_block, int(bm.group(1)))
    except UnicodeDecodeError as e:
        raise ModelFileError(f"corrupt GGUF file (a metadata string is not UTF-8): {p}") from e
    except OSError as e:
        raise ModelFileError(f"cannot read model file {p}: {e.strerror or e}") from e
    except (ValueError, IndexError, KeyError) as e:
        raise ModelFileError(_unreadable(p, e)) from e
    if not arch:
        raise ModelFileError(f"GGUF file has no general.architecture: {p}")
    if not tokens:
        raise ModelFileError(f"GGUF file has no tokenizer (tokenizer.ggml.tokens): {p}")
    if max_block < 0:
        raise ModelFileError(f"could not infer the layer count (no blk.N tensors) of {p}")
    add_bos = _field(reader, "tokenizer.ggml.add_bos_token")
    n_nextn = int(_field(reader, f"{arch}.nextn_predict_layers") or 0)
    vocab_model = _field(reader, "tokenizer.ggml.model") or "unknown"
    return ModelInfo(
        path=p,
        shards=shards,
        name=_field(reader, "general.name") or p.stem,
        architecture=arch,
        file_type=_file_type_name(_field(reader, "general.file_type")),
        n_layer=max_block + 1,
        vocab_model=vocab_model,
        vocab_size=len(tokens),
        bos_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_id=_field(reader, "tokenizer.ggml.eos_token_id"),
        eot_id=_field(reader, "tokenizer.ggml.eot_token_id"),
        # llama.cpp's default when the key is absent: SPM adds BOS, BPE does not
        add_bos=bool(add_bos) if add_bos is not None else vocab_model == "llama",
        chat_template=_field(reader, "tokenizer.chat_template"),
        context_length=_field(reader, f"{arch}.context_length"),
        size_bytes=sum(s.stat().st_size for s in shards),
        tokens=tuple(tokens),
        n_params=n_params,
        n_nextn=n_nextn,
        mtp_only=n_nextn > 0 and not trunk,
    )


def cached_model_info(path: str | Path, cache_dir: Path | None) -> ModelInfo:
    """:func:`read_model_info`, memoised on disk by (path, size, mtime) of every shard.

    Parsing a large vocabulary with ``gguf`` takes seconds (about 15 s for
    262,144 tokens on a 2-core machine); the cache makes later starts instant.
    A missing or corrupt cache entry is simply rebuilt; writes are atomic.

    Raises:
        ModelFileError: as :func:`read_model_info`.
    """
    from ..jsoncache import file_key, read_entry, write_entry

    p = Path(path).expanduser()
    if cache_dir is None or not p.is_file():
        return read_model_info(p)
    # every shard is in the key: a re-downloaded second shard changes the size and n_params
    entry = cache_dir / f"{file_key(p, CACHE_VERSION, *(file_key(s) for s in shard_paths(p)[1:]))}.json"
    data = read_entry(entry)
    try:
        # the key is the resolved file: the entry may have been written through another
        # name (a symlink), so the paths are this call's, never the cached ones
        data["path"] = p
        data["shards"] = tuple(shard_paths(p))
        data["tokens"] = tuple(data["tokens"])
        return ModelInfo(**data)
    except (ValueError, TypeError, KeyError):
        pass
    info = read_model_info(p)
    data = {k: getattr(info, k) for k in info.__dataclass_fields__}
    data["path"] = str(info.path)
    data["shards"] = [str(s) for s in info.shards]
    data["tokens"] = list(info.tokens)
    write_entry(entry, data)
    return info
