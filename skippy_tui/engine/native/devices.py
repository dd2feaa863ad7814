"""ggml's backend devices (CPU, CUDA0, Metal…), listed through libggml directly.

llama-cpp-python binds llama.h only; the device registry lives in
``libggml``/``libggml-base``, loaded here by path next to the binding's own
library. :func:`device_handle` is what a model's ``device = "..."`` selects.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelFileError
from .backend import ensure_backend
from .backend import llama_cpp as _L

_DEV_TYPES = {0: "CPU", 1: "GPU", 2: "iGPU", 3: "ACCEL"}


@dataclass(frozen=True, slots=True)
class Device:
    """A ggml backend device (``name`` is what ``device = "..."`` in config selects)."""

    name: str
    description: str
    kind: str


def shared_lib(name: str) -> ctypes.CDLL:
    """The copy of ``lib<name>.so`` that libllama itself uses (``ggml``, ``ggml-base``).

    Wheels ship ``libggml.so`` and ``libggml.so.0`` as separate copies, and
    libllama links the ``.so.0`` one (its SONAME): opening the other by path
    would load a second ggml with its own device registry and abort hook.
    """
    base = Path(_L.llama_cpp._base_path)
    for candidate in (f"lib{name}.so.0", str(base / f"lib{name}.so.0"), str(base / f"lib{name}.so")):
        try:
            return ctypes.CDLL(candidate)
        except OSError:
            continue
    raise OSError(f"lib{name}.so not found next to {base}")


@functools.cache
def _ggml() -> ctypes.CDLL:
    lib = shared_lib("ggml")
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_by_name.restype = ctypes.c_void_p
    lib.ggml_backend_dev_by_name.argtypes = [ctypes.c_char_p]
    base = shared_lib("ggml-base")
    for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(base, fn).restype = ctypes.c_char_p
        getattr(base, fn).argtypes = [ctypes.c_void_p]
    base.ggml_backend_dev_type.restype = ctypes.c_int
    base.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib._base = base  # type: ignore[attr-defined]
    return lib


def list_devices() -> list[Device]:
    """The backend devices this llama.cpp build can use (CPU always, GPUs if built in)."""
    ensure_backend()
    try:
        lib = _ggml()
    except OSError:
        return [Device("CPU", "CPU", "CPU")]
    base = lib._base  # type: ignore[attr-defined]
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        out.append(
            Device(
                (base.ggml_backend_dev_name(dev) or b"?").decode(),
                (base.ggml_backend_dev_description(dev) or b"").decode(),
                _DEV_TYPES.get(base.ggml_backend_dev_type(dev), "?"),
            )
        )
    return out


def system_info() -> str:
    """llama.cpp's build and CPU feature line (``LLAMAFILE = 1`` marks batch-variant sgemm)."""
    ensure_backend()
    return _L.llama_print_system_info().decode("utf-8", "replace").strip()


@functools.cache
def backend_name() -> str:
    """``CPU``, ``CUDA``, ``Metal``, ``Vulkan``… — the first non-CPU device's backend, else CPU."""
    for d in list_devices():
        if d.kind != "CPU" and not _is_remote(d.name):
            return d.name.rstrip("0123456789") or d.name
    return "CPU"


def _is_remote(name: str) -> bool:
    """An RPC server's device (``RPC0``…): named in the status bar by :mod:`.rpc`, not as the backend."""
    return name.startswith("RPC") and name[3:].isdigit()


def local_accelerators() -> list[int]:
    """Handles of this machine's GPUs (or, with none, its integrated GPUs), as llama.cpp's default list has them.

    RPC devices are left out: a model lists the ones of its own servers itself.
    """
    return [handle for handle, _ in _local_accelerators()]


def accelerator_names() -> list[str]:
    """The names of :func:`local_accelerators` (``CUDA0``…), in the same order."""
    return [name for _, name in _local_accelerators()]


def _local_accelerators() -> list[tuple[int, str]]:
    ensure_backend()
    try:
        lib = _ggml()
    except OSError:
        return []
    base = lib._base  # type: ignore[attr-defined]
    gpus: list[tuple[int, str]] = []
    igpus: list[tuple[int, str]] = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        name = (base.ggml_backend_dev_name(dev) or b"").decode()
        if _is_remote(name):
            continue
        kind = _DEV_TYPES.get(base.ggml_backend_dev_type(dev))
        (gpus if kind == "GPU" else igpus if kind == "iGPU" else []).append((dev, name))
    return gpus or igpus


def placement(devices: Sequence[str], n_gpu_layers: int, n_layer: int) -> str:
    """Where a model's layers run, for the status bar: ``CPU``, ``CUDA0``, ``CUDA0+CUDA1``,
    ``RPC0@host:port``, with ``+CPU`` when some layers stay on the CPU.

    ``devices``: the model's device list in llama.cpp's order (a ``CPU`` entry is the CPU
    itself). llama.cpp offloads ``n_gpu_layers`` of the ``n_layer + 1`` layers (the output
    layer is one more; -1: all) to them, the rest run on the CPU.
    """
    offload = [d for d in devices if d.upper() != "CPU"]
    if not offload or n_gpu_layers == 0:
        return "CPU"
    label = "+".join(offload)
    return f"{label}+CPU" if 0 <= n_gpu_layers <= n_layer else label


def device_handle(name: str) -> int:
    """The ``ggml_backend_dev_t`` pointer of device ``name``, for a model's device list.

    Raises:
        ModelFileError: no ggml library, or no device of that name (the message lists those there are).
    """
    ensure_backend()
    try:
        lib = _ggml()
    except OSError as e:
        raise ModelFileError(f"cannot select device {name!r}: ggml library not found ({e})") from e
    dev = lib.ggml_backend_dev_by_name(name.encode())
    if not dev:
        known = ", ".join(d.name for d in list_devices())
        raise ModelFileError(f"device {name!r} not found; this build has: {known}")
    return dev
