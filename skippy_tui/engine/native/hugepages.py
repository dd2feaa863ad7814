"""Model weights in transparent huge pages (Linux THP).

Every decode on a CPU streams all of a model's weights (540 MB for the default
F32 target), and with 4 KiB pages that is ~135 000 TLB entries a token; 2 MiB
pages need 512 times fewer. Plain decoding on the default target ran 1.13x as
fast with its weights in huge pages, the two loads side by side in one process
(README, "Huge pages"). A file mapping does not get them (the kernel does not
collapse the page cache of a non-executable file), so:

- a model llama.cpp maps (``mmap``, the default) loads as usual, and afterwards
  :func:`move_to_huge_pages` copies each stretch of the mapping into anonymous
  memory advised ``MADV_HUGEPAGE`` and moves that memory over the mapping's own
  addresses (``mremap``): every pointer llama.cpp holds stays valid and reads
  the same bytes, only the pages under it change. It runs after the app is
  ready, in the background (~0.3-1.4 s of one core for 540 MB);
- a model read into memory (``mmap = false``) has its buffers advised at load
  (:class:`HugePageAdvice`): llama.cpp allocates them before it reads a byte
  into them and reports progress between the two.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

_MADV_HUGEPAGE = 14  # Linux <asm-generic/mman-common.h>
_PROT_READ, _PROT_WRITE = 1, 2
_MAP_PRIVATE_ANONYMOUS = 0x02 | 0x20
_MREMAP_MAYMOVE_FIXED = 1 | 2
_MAP_FAILED = ctypes.c_void_p(-1).value
_HUGE = 2 << 20  # the x86-64 / arm64 (4 KiB granule) PMD page: advice on smaller regions is moot
CHUNK = 64 << 20
"""Bytes moved per step of :func:`move_to_huge_pages` (a close waits for at most one)."""
_THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")
_MAPS = Path("/proc/self/maps")
_MEMINFO = Path("/proc/meminfo")


def thp_mode() -> str:
    """The kernel's THP mode, ``"always"``, ``"madvise"`` or ``"never"``; ``"never"``
    where there is no such setting (not Linux, or a kernel without THP)."""
    try:
        text = _THP_ENABLED.read_text()
    except OSError:
        return "never"
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else "never"


def mem_available() -> int:
    """Bytes the kernel reckons a new allocation can get without swapping
    (``MemAvailable``); 0 where unknown."""
    try:
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


@dataclass(frozen=True)
class HostFacts:
    """What decides ``hugepages = "auto"`` for one model, besides its size."""

    thp: str
    """The kernel's THP mode (:func:`thp_mode`)."""
    available: int
    """``MemAvailable``, bytes."""
    weights_on_host: bool
    """The weights stay in this machine's RAM (no GPU or RPC server holds them)."""


def wanted(setting: bool | str, file_bytes: int, facts: HostFacts) -> bool:
    """Whether a model of ``file_bytes`` gets its weights in huge pages.

    ``setting``: ``True`` — whenever the kernel offers THP; ``False`` — never;
    ``"auto"`` — when it does, the weights are in host RAM and the file takes at
    most half of the available memory (the read copy sits beside the file's
    page cache until the kernel reclaims it, where a mapping would share it).
    """
    if setting is False or facts.thp not in ("always", "madvise"):
        return False
    if setting is True:
        return True
    return facts.weights_on_host and 0 < file_bytes <= facts.available // 2


def _mappings() -> Iterator[tuple[int, int, str, str]]:
    """``(start, end, perms, path)`` of this process's mappings (path "" when anonymous)."""
    try:
        lines = _MAPS.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        fields = line.split(maxsplit=5)
        start, end = (int(x, 16) for x in fields[0].split("-"))
        yield start, end, fields[1], fields[5] if len(fields) == 6 else ""


def _anonymous_regions() -> set[tuple[int, int]]:
    """``(start, end)`` of this process's writable anonymous mappings of at least 2 MiB
    (not [heap], [stack] or a file)."""
    return {(a, b) for a, b, perms, path in _mappings() if not path and perms.startswith("rw") and b - a >= _HUGE}


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """libc with ``madvise``, ``mmap``, ``mremap``, ``mprotect`` and ``munmap`` typed; None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        vp, size, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
        for name, args, res in (
            ("madvise", [vp, size, i], i),
            ("mprotect", [vp, size, i], i),
            ("munmap", [vp, size], i),
            ("mmap", [vp, size, i, i, i, ctypes.c_long], vp),
            ("mremap", [vp, size, size, i, vp], vp),
        ):
            fn = getattr(libc, name)
            fn.argtypes, fn.restype = args, res
    except (OSError, AttributeError):
        return None
    return libc


def file_regions(path: Path) -> list[tuple[int, int]]:
    """``(start, end)`` of this process's mappings of the file ``path``."""
    want = os.path.realpath(path)
    return [(a, b) for a, b, _perms, mapped in _mappings() if mapped == want]


def _move_stretch(libc: ctypes.CDLL, start: int, end: int) -> bool:
    """Copy ``[start, end)`` into fresh memory advised huge, and move it over the same addresses.

    The copy is aligned like the original modulo 2 MiB, so its huge pages land on the
    original's 2 MiB boundaries. Returns False (the original left in place) on any failure."""
    size = end - start
    raw = libc.mmap(None, size + _HUGE, _PROT_READ | _PROT_WRITE, _MAP_PRIVATE_ANONYMOUS, -1, 0)
    if raw in (None, _MAP_FAILED):
        return False
    dst = raw + (start - raw) % _HUGE
    first = -(-dst // _HUGE) * _HUGE
    libc.madvise(first, dst + size - first, _MADV_HUGEPAGE)
    ctypes.memmove(dst, start, size)
    libc.mprotect(dst, size, _PROT_READ)  # as llama.cpp maps weights: read-only
    moved = libc.mremap(dst, size, size, _MREMAP_MAYMOVE_FIXED, start) == start
    if not moved:
        libc.munmap(dst, size)
    if dst > raw:  # the slack either side of the copy
        libc.munmap(raw, dst - raw)
    if raw + _HUGE > dst:
        libc.munmap(dst + size, raw + _HUGE - dst)
    return moved


def move_to_huge_pages(regions: list[tuple[int, int]], stop: Callable[[], bool]) -> int:
    """Move the mapped ``(start, end)`` regions into huge pages, :data:`CHUNK` bytes at a time.

    ``regions``: one model's own mappings of its file (:func:`file_regions` after its load,
    less those before: another model of the same file may be freed meanwhile). Each
    stretch is replaced atomically by one ``mremap`` with the same bytes at the same
    addresses, so threads reading the weights meanwhile (a decode) read the same values.
    ``stop`` is asked between stretches. The caller keeps the mapping alive meanwhile (the
    model is not freed until this returns). Call it where :func:`wanted` said yes. Returns
    the bytes moved (0 off Linux).
    """
    libc = _libc()
    if libc is None:
        return 0
    moved = 0
    for start, end in regions:
        edges = sorted({start, end, *range(-(-start // CHUNK) * CHUNK, end, CHUNK)})
        for a, b in itertools.pairwise(edges):
            if stop():
                return moved
            if -(-a // _HUGE) * _HUGE + _HUGE > b:
                continue  # holds no whole huge page
            if not _move_stretch(libc, a, b):
                return moved
            moved += b - a
    return moved


class HugePageAdvice:
    """Advises ``MADV_HUGEPAGE`` for the memory a load allocates.

    Made before the load (it notes the mappings that exist then); :meth:`advise`
    then covers every anonymous mapping of 2 MiB or more that is new since, and
    may be called again (each region is advised once). ``advised`` totals the
    bytes advised; ``calls`` counts the calls.
    """

    def __init__(self) -> None:
        self._before = _anonymous_regions()
        self._done: set[tuple[int, int]] = set()
        self.advised = 0
        self.calls = 0

    def advise(self) -> int:
        """Advise the regions new since construction; returns the bytes advised by this call."""
        self.calls += 1
        libc = _libc()
        if libc is None:
            return 0
        added = 0
        for start, end in sorted(_anonymous_regions() - self._before - self._done):
            self._done.add((start, end))
            first = -(-start // _HUGE) * _HUGE  # the advice covers whole huge pages only
            if end - first >= _HUGE and libc.madvise(first, end - first, _MADV_HUGEPAGE) == 0:
                added += end - first
        self.advised += added
        return added


class ModelPages:
    """One model's weights and huge pages, from its load to its free.

    Made before llama.cpp loads the model: ``wanted`` (:func:`wanted`) with ``mmap``
    means a move after the load (``pending``; :meth:`move`), without it advice at
    the load (:meth:`on_progress`, from llama.cpp's progress callback, then
    :meth:`loaded`). ``bytes``: how much of the weights was advised or moved.
    The model frees its weights inside :meth:`stopped`, which ends a move first.
    """

    def __init__(self, path: Path, wanted: bool, mmap: bool, mlock: bool) -> None:
        self.pending = wanted and mmap and not mlock
        self.advice = HugePageAdvice() if wanted and not mmap else None
        self.bytes = 0
        self._path = path
        # the model's own mappings are those new after its load: another model of the
        # same file may be freed during a move, so its mapping must not be touched
        self._before = set(file_regions(path)) if self.pending else set()
        self._mapped: list[tuple[int, int]] = []
        self._lock = threading.Lock()
        self._stopping = False

    def on_progress(self) -> None:
        """At llama.cpp's first progress report the buffers exist, and the file is not read into them yet."""
        if self.advice is not None and not self.advice.calls:
            self.advice.advise()

    def loaded(self) -> None:
        """After the load: advise what the first report missed; note the model's mappings."""
        if self.advice is not None:
            self.advice.advise()  # khugepaged collapses a buffer advised after it was read
            self.bytes = self.advice.advised
        if self.pending:
            self._mapped = [r for r in file_regions(self._path) if r not in self._before]

    def move(self) -> int:
        """Move the mapped weights into huge pages (:func:`move_to_huge_pages`), once;
        returns the bytes moved. Safe beside decodes on other threads."""
        with self._lock:
            if not self.pending or self._stopping:
                return 0
            self.pending = False
            moved = move_to_huge_pages(self._mapped, lambda: self._stopping)
            self.bytes += moved
            return moved

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """Stop a move (at its next chunk) and hold it off while the body frees the weights."""
        self._stopping = True
        with self._lock:
            yield
