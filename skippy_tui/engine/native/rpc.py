"""Remote devices over llama.cpp's RPC backend (``rpc-server`` on other hosts).

A server is added the way llama.cpp's ``--rpc`` adds it: the ``RPC`` backend
registry's ``ggml_backend_rpc_add_server`` returns a registry whose devices
(``RPC0``, ``RPC1``…) are registered with ``ggml_backend_device_register``;
a model then lists them among its devices and splits its layers over them with
the usual ``device`` / ``split_mode`` / ``tensor_split`` settings.

llama.cpp's RPC client ends the process (``GGML_ABORT``) when a server cannot
be reached or dies. So that a failure is one clear error instead:

* :func:`probe` connects and does the protocol's HELLO handshake in Python
  before llama.cpp ever connects: an unreachable server, or one of another
  protocol version, is refused before any weights load.
* ggml's abort hook (``ggml_set_abort_callback``) is set; on an abort raised in
  ``ggml-rpc`` it marks the servers that stopped answering as lost and parks
  the aborting native thread for good, instead of returning to ``abort()``.
* Every native call of a model on a remote device runs through :func:`call`:
  in a helper thread, while the caller waits on either its result or a loss,
  and then raises :class:`RpcLostError` naming the host. The stuck helper
  thread, the models and their buffers are abandoned (never freed: freeing
  would talk to the dead server again); the next load connects afresh.
"""

from __future__ import annotations

import ctypes
import functools
import socket
import struct
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import DecodeError, SkippyError
from .backend import ensure_backend

# The RPC protocol of the llama.cpp that llama-cpp-python 0.3.36 vendors (ggml/include/ggml-rpc.h):
# a server must speak the same major version and no newer minor one.
PROTO_VERSION = (7, 0, 0)
_CMD_HELLO = 14  # fixed forever by the protocol (static_assert in ggml-rpc.cpp)
_CAPS_SIZE = 24  # rpc_msg_hello_req: uint8_t conn_caps[24]
_HELLO_RSP_SIZE = 4 + _CAPS_SIZE  # major, minor, patch, padding, conn_caps
PROBE_TIMEOUT_S = 5.0

T = TypeVar("T")


class RpcError(SkippyError):
    """An RPC server is unreachable, speaks another protocol version, or is misnamed."""


class RpcLostError(RpcError, DecodeError):
    """An RPC server stopped answering while a model on it was in use.

    The models on it are unusable until loaded again (when the server is back).
    """


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``"host:port"`` → ``(host, port)``.

    Raises:
        RpcError: not ``host:port`` with a port in 1..65535 (IPv6 addresses are
            not supported by llama.cpp's RPC client; use a host name).
    """
    if not isinstance(endpoint, str) or endpoint.count(":") != 1:
        raise RpcError(f"RPC server {endpoint!r} is not HOST:PORT (e.g. 192.168.1.20:50052)")
    host, port_text = endpoint.split(":")
    if not host or any(c.isspace() for c in host) or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise RpcError(f"RPC server {endpoint!r} is not HOST:PORT with a port in 1..65535")
    return host, int(port_text)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def probe(endpoint: str, timeout: float = PROBE_TIMEOUT_S) -> tuple[int, int, int]:
    """Connect to an ``rpc-server`` and check its protocol version; returns it.

    Sends the HELLO command exactly as llama.cpp's client does (no transport
    upgrade asked) and closes; the server then waits for its next client.

    Raises:
        RpcError: cannot connect (the message names the host and the reason),
            no answer within ``timeout`` seconds, or a version this client
            cannot talk to ("version mismatch").
    """
    host, port = parse_endpoint(endpoint)
    want = ".".join(map(str, PROTO_VERSION))
    mismatch = (
        f"RPC server {endpoint}: version mismatch: it speaks RPC protocol {{got}}, this client {want} — "
        "run an rpc-server built from the same llama.cpp as llama-cpp-python (see README, RPC)"
    )
    try:
        s = socket.create_connection((host, port), timeout=timeout)
    except TimeoutError as e:
        raise RpcError(f"cannot connect to RPC server {endpoint}: no answer within {timeout:g} s") from e
    except OSError as e:
        raise RpcError(f"cannot connect to RPC server {endpoint}: {e.strerror or e}") from e
    with s:
        try:
            s.sendall(struct.pack("<BQ", _CMD_HELLO, _CAPS_SIZE) + bytes(_CAPS_SIZE))
            (size,) = struct.unpack("<Q", _recv_exact(s, 8))
            if size != _HELLO_RSP_SIZE:
                raise RpcError(mismatch.format(got=f"with a {size}-byte handshake"))
            major, minor, patch = _recv_exact(s, size)[:3]
        except (EOFError, ConnectionResetError):
            # a server of another protocol version drops a HELLO of the wrong size unanswered
            got = "another version (it closed the connection at the handshake)"
            raise RpcError(mismatch.format(got=got)) from None
        except TimeoutError as e:
            # an rpc-server serves one client at a time: a busy one leaves the handshake waiting
            raise RpcError(
                f"RPC server {endpoint} did not answer the handshake within {timeout:g} s "
                "(is it serving another client?)"
            ) from e
        except OSError as e:
            raise RpcError(f"RPC server {endpoint}: handshake failed: {e.strerror or e}") from e
    if major != PROTO_VERSION[0] or minor > PROTO_VERSION[1]:
        raise RpcError(mismatch.format(got=f"{major}.{minor}.{patch}"))
    return major, minor, patch


# -- ggml's registry ----------------------------------------------------------------------


@functools.cache
def _ggml() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    """(libggml, libggml-base) with the registry functions typed."""
    from .devices import shared_lib

    lib, base = shared_lib("ggml"), shared_lib("ggml-base")
    vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    for owner, name, res, args in (
        (lib, "ggml_backend_reg_by_name", vp, [cp]),
        (lib, "ggml_backend_device_register", None, [vp]),
        (base, "ggml_backend_reg_get_proc_address", vp, [vp, cp]),
        (base, "ggml_backend_reg_dev_count", sz, [vp]),
        (base, "ggml_backend_reg_dev_get", vp, [vp, sz]),
        (base, "ggml_backend_dev_name", cp, [vp]),
        (base, "ggml_set_abort_callback", vp, [vp]),
    ):
        fn = getattr(owner, name)
        fn.restype, fn.argtypes = res, args
    return lib, base


def supported() -> bool:
    """True when this llama.cpp build has the RPC backend (``-DGGML_RPC=ON``)."""
    ensure_backend()
    try:
        return bool(_ggml()[0].ggml_backend_reg_by_name(b"RPC"))
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True, slots=True)
class RemoteDevice:
    """A device on an RPC server: ggml's ``name`` (``RPC0``…), the server's ``endpoint``, its handle."""

    name: str
    endpoint: str
    handle: int
    generation: int

    @property
    def label(self) -> str:
        """``RPC0@host:port``, as the status bar shows it."""
        return f"{self.name}@{self.endpoint}"


_lock = threading.RLock()
_devices: dict[str, tuple[RemoteDevice, ...]] = {}  # endpoint -> its devices, current connection
_generation: dict[str, int] = {}  # endpoint -> connections made (each loss starts a new one)
_lost: dict[tuple[str, int], str] = {}  # (endpoint, generation) -> why it is lost
_waiters: set[threading.Event] = set()  # calls in flight, woken by a loss
_abort_ref: list[Any] = []  # keeps the ctypes abort callback alive


def _require_support() -> None:
    if not supported():
        raise RpcError(
            "this llama-cpp-python was built without RPC: reinstall it with "
            'CMAKE_ARGS="-DGGML_LLAMAFILE=OFF -DGGML_RPC=ON" pip install --force-reinstall --no-cache-dir '
            "llama-cpp-python (see README)"
        )


def check(endpoints: Iterable[str]) -> None:
    """Probe each server not already connected (a connected one serves only us: a probe would wait).

    Raises:
        RpcError: no RPC in this build, or as :func:`probe`.
    """
    endpoints = list(dict.fromkeys(endpoints))
    if endpoints:
        _require_support()
    for endpoint in endpoints:
        with _lock:
            known = _devices.get(endpoint)
            if known and (endpoint, known[0].generation) not in _lost:
                continue
        probe(endpoint)


def connect(endpoints: Sequence[str]) -> tuple[RemoteDevice, ...]:
    """Add RPC servers as ggml devices (once per process and connection); their devices, in order.

    A server already added and not lost is reused. One that was lost is
    reconnected under a new spelling of its endpoint (``host:0port``): llama.cpp
    keys connections by that string and keeps the dead one.

    Raises:
        RpcError: no RPC in this build, a malformed endpoint, an unreachable
            server, a version mismatch, or a server without devices.
    """
    out: list[RemoteDevice] = []
    for endpoint in endpoints:
        parse_endpoint(endpoint)
        with _lock:
            known = _devices.get(endpoint)
            if known and (endpoint, known[0].generation) not in _lost:
                out += known
                continue
        _require_support()
        probe(endpoint)
        out += _add_server(endpoint)
    return tuple(out)


def _add_server(endpoint: str) -> tuple[RemoteDevice, ...]:
    lib, base = _ggml()
    _install_abort_hook()
    with _lock:
        gen = _generation.get(endpoint, -1) + 1
        _generation[endpoint] = gen
    host, port = parse_endpoint(endpoint)
    spelled = f"{host}:{'0' * gen}{port}"  # llama.cpp parses the port with stoi: leading zeros are harmless
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    addr = base.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
    if not addr:
        raise RpcError("this llama.cpp's RPC backend has no ggml_backend_rpc_add_server")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(addr)
    server_reg = call([(endpoint, gen)], add_server, spelled.encode())
    if not server_reg:
        raise RpcError(f"RPC server {endpoint} has no devices")
    devices = []
    for i in range(base.ggml_backend_reg_dev_count(server_reg)):
        dev = base.ggml_backend_reg_dev_get(server_reg, i)
        lib.ggml_backend_device_register(dev)
        devices.append(RemoteDevice(base.ggml_backend_dev_name(dev).decode(), endpoint, dev, gen))
    with _lock:
        _devices[endpoint] = tuple(devices)
    return tuple(devices)


def registered() -> tuple[RemoteDevice, ...]:
    """Every remote device this process registered (lost ones included: ggml cannot forget them)."""
    with _lock:
        return tuple(d for ds in _devices.values() for d in ds)


def device_named(name: str) -> RemoteDevice | None:
    """The current device called ``name`` (``RPC0``), or a server's first device by ``host:port``."""
    with _lock:
        for ds in _devices.values():
            for d in ds:
                if name in (d.name, d.endpoint) and (d.endpoint, d.generation) not in _lost:
                    return d
    return None


# -- losses ----------------------------------------------------------------------------------


def _install_abort_hook() -> None:
    with _lock:
        if _abort_ref:
            return

        @ctypes.CFUNCTYPE(None, ctypes.c_char_p)
        def _on_abort(message: bytes) -> None:  # pragma: no cover - runs on ggml's aborting thread
            text = (message or b"").decode("utf-8", "replace")
            if "ggml-rpc" not in text:
                # not ours: let ggml abort as it would have (its default prints the message)
                import sys

                sys.stderr.write(text + "\n")
                return
            _mark_lost(text)
            threading.Event().wait()  # never return: returning would abort() the process

        _abort_ref.append(_on_abort)
        _ggml()[1].ggml_set_abort_callback(ctypes.cast(_on_abort, ctypes.c_void_p))


def _mark_lost(message: str) -> None:
    """Mark the servers that no longer accept connections lost (all of them if none refuses)."""
    with _lock:
        current = [(ep, ds[0].generation) for ep, ds in _devices.items() if ds and (ep, ds[0].generation) not in _lost]
    dead = [key for key in current if not _accepts(key[0])] or current
    why = message.split(": ", 1)[-1].strip() or "connection lost"
    with _lock:
        for endpoint, gen in dead:
            _lost[endpoint, gen] = (
                f"RPC server {endpoint} stopped answering ({why}); load the models again when it is back"
            )
        for event in _waiters:
            event.set()


def _accepts(endpoint: str) -> bool:
    host, port = parse_endpoint(endpoint)
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def lost_reason(servers: Iterable[tuple[str, int]]) -> str:
    """Why one of ``servers`` ((endpoint, generation) pairs) is lost, or ``""``."""
    with _lock:
        return next((_lost[s] for s in servers if s in _lost), "")


def call(servers: Sequence[tuple[str, int]], fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, a native call that may talk to ``servers``; direct when there are none.

    Raises:
        RpcLostError: one of the servers was lost before or during the call;
            the call's thread is left blocked in llama.cpp for good.
    """
    if not servers:
        return fn(*args)
    why = lost_reason(servers)
    if why:
        raise RpcLostError(why)
    done = threading.Event()
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, fn(*args)))
        except BaseException as e:  # re-raised in the caller
            box.append((False, e))
        finally:
            done.set()

    with _lock:
        _waiters.add(done)
    try:
        threading.Thread(target=run, name="skippy-rpc-call", daemon=True).start()
        done.wait()
    finally:
        with _lock:
            _waiters.discard(done)
    if box:
        ok, value = box[0]
        if ok:
            return value
        raise value
    raise RpcLostError(lost_reason(servers) or "an RPC server stopped answering")


def status_label(models: Iterable[Any]) -> str:
    """The remote devices the given models use, for the status bar: ``RPC0@host:port``…, or ``""``."""
    seen: list[str] = []
    for m in models:
        for d in getattr(m, "remote_devices", ()):
            if d.label not in seen:
                seen.append(d.label)
    return " ".join(seen)


def _models(speculator: Any) -> list[Any]:
    cache = speculator.draft_cache
    return [speculator.target] + ([cache.ctx.model] if cache is not None else [])


def remote_label(speculator: Any) -> str:
    """:func:`status_label` of a loaded speculator's target and draft model."""
    if getattr(speculator, "separate_process", False):  # engine/process/proxy.py: as its child last said
        return speculator.remote
    return status_label(_models(speculator)) if speculator is not None else ""


def placements(speculator: Any) -> list[tuple[str, str]]:
    """``(role, where)`` for the target and the draft model of a loaded speculator, where
    each one's layers run (:attr:`.model.Model.placement`: ``CPU``, ``CUDA0``,
    ``RPC0@host:port``, …). An engine process says it from its load."""
    if getattr(speculator, "separate_process", False):
        return list(speculator.placements)
    models = _models(speculator)
    if len(models) == 2 and models[1] is models[0]:  # an integrated MTP head drafts on the target itself
        models = models[:1]
    return [(role, m.placement) for role, m in zip(("target", "draft"), models) if getattr(m, "placement", "")]


def devices_label(speculator: Any) -> str:
    """Where a loaded speculator's models run: ``CPU`` (or ``CUDA0``, ``RPC0@host:port``…) when
    both run there, else ``target CUDA0 · draft CPU``. Without placements, the ggml backend's
    name and the remote devices (``CPU + RPC0@host:port``)."""
    where = placements(speculator)
    if where:
        if len({w for _, w in where}) == 1:
            return where[0][1]
        return " · ".join(f"{role} {w}" for role, w in where)
    if getattr(speculator, "separate_process", False):
        backend = speculator.backend
    else:
        from .devices import backend_name

        backend = backend_name()
    return " + ".join(filter(None, (backend, remote_label(speculator))))


def speculator_lost(speculator: Any) -> str:
    """Why a loaded speculator's RPC server is lost (it must be loaded again), or ``""``.

    For a speculator in an engine process, also why that process exited."""
    if speculator is None:
        return ""
    if getattr(speculator, "separate_process", False):
        return speculator.lost
    return lost_reason(s for m in _models(speculator) for s in getattr(m, "rpc_servers", ()))
