"""Target and draft over llama.cpp's RPC backend (issue 11), against a real ``ggml-rpc-server``.

The server is built once from the llama.cpp that the installed llama-cpp-python
vendors (``tools/build-rpc-server.sh``, cached under ``.cache/rpc-server/``) and
started per test on 127.0.0.1 on a free port. Where it cannot be built the
tests fail with the build's reason: CI must not pass without them.
"""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import EXACT, THREADS

from skippy_tui.cli_common import config_from_args
from skippy_tui.config import ConfigError, load_config
from skippy_tui.engine.events import ReplyFinished, StepVerified
from skippy_tui.engine.load.loader import EngineSpec, load_speculator
from skippy_tui.engine.native import rpc
from skippy_tui.engine.native.model import LoadParams
from skippy_tui.engine.sampling.params import SamplingParams
from skippy_tui.engine.settings import GenerationSettings, ModelSpec, SpeculationSettings
from skippy_tui.engine.speculator import Speculator

ROOT = Path(__file__).resolve().parents[3]
GREEDY = GenerationSettings(SamplingParams(temperature=0.0), max_tokens=40)
PROMPTS = ["Name three colours and say why each is nice.", "Write a haiku about autumn leaves."]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- pure logic ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["localhost", "host:", ":50052", "host:0", "host:70000", "h st:1", "::1:50052", "a:b"])
def test_malformed_endpoints_are_refused_with_the_form_expected(bad: str) -> None:
    with pytest.raises(rpc.RpcError, match="HOST:PORT"):
        rpc.parse_endpoint(bad)


def test_endpoint_parses_into_host_and_port() -> None:
    assert rpc.parse_endpoint("10.0.0.7:50052") == ("10.0.0.7", 50052)


def test_config_rpc_is_inherited_by_the_draft_and_may_be_overridden(tmp_path: Path) -> None:
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('[target]\nrpc = ["10.0.0.7:50052", "10.0.0.8:50052"]\ntensor_split = [3, 1]\n')
    spec = load_config(cfg_file).engine_spec()
    assert spec.target.load.rpc == ("10.0.0.7:50052", "10.0.0.8:50052")
    assert spec.target.load.tensor_split == (3.0, 1.0)
    assert spec.draft is not None and spec.draft.load.rpc == spec.target.load.rpc
    cfg_file.write_text('[target]\nrpc = ["10.0.0.7:50052"]\n[draft]\nrpc = []\n')
    spec = load_config(cfg_file).engine_spec()
    assert spec.target.load.rpc == ("10.0.0.7:50052",) and spec.draft is not None and spec.draft.load.rpc == ()


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ('rpc = ["nohost"]', "target.rpc"),
        ('rpc = ["a:1", "a:1"]', "distinct"),
        ("rpc = [1]", "expected a list"),
        ("tensor_split = [0, 0]", "target.tensor_split"),
        ('tensor_split = ["x"]', "expected a list"),
    ],
)
def test_bad_rpc_settings_are_one_config_error(tmp_path: Path, toml: str, needle: str) -> None:
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text(f"[target]\n{toml}\n")
    with pytest.raises(ConfigError, match=needle):
        load_config(cfg_file).engine_spec()


def test_rpc_flag_is_repeatable_and_sets_the_target() -> None:
    from skippy_tui.cli import build_parser

    args = build_parser().parse_args(["run", "hi", "--rpc", "10.0.0.7:50052", "--rpc", "10.0.0.8:1"])
    assert config_from_args(args).engine_spec().target.load.rpc == ("10.0.0.7:50052", "10.0.0.8:1")


def _fake_server(reply: bytes | None) -> tuple[int, threading.Thread]:
    """A one-shot TCP server that reads a HELLO and answers ``reply`` (None: closes unanswered)."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve() -> None:
        with srv:
            conn, _ = srv.accept()
            with conn:
                conn.recv(1 + 8 + 24)
                if reply is not None:
                    conn.sendall(reply)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return port, t


def test_a_server_of_another_protocol_version_is_reported_as_a_version_mismatch() -> None:
    import struct

    port, t = _fake_server(struct.pack("<Q", 28) + bytes([6, 2, 1, 0]) + bytes(24))
    with pytest.raises(rpc.RpcError, match=rf"127\.0\.0\.1:{port}: version mismatch: it speaks RPC protocol 6\.2\.1"):
        rpc.probe(f"127.0.0.1:{port}")
    t.join(5)
    port, t = _fake_server(None)  # an older server drops a HELLO of the wrong size
    with pytest.raises(rpc.RpcError, match="version mismatch"):
        rpc.probe(f"127.0.0.1:{port}")
    t.join(5)


def test_a_busy_server_that_never_answers_the_handshake_is_a_timeout_naming_it() -> None:
    with socket.create_server(("127.0.0.1", 0)) as srv:  # listens, never accepts: like a server with a client
        port = srv.getsockname()[1]
        with pytest.raises(rpc.RpcError, match=rf"127\.0\.0\.1:{port} did not answer the handshake within 0\.3 s"):
            rpc.probe(f"127.0.0.1:{port}", timeout=0.3)


def test_a_build_without_rpc_is_told_how_to_reinstall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rpc, "supported", lambda: False)
    with pytest.raises(rpc.RpcError, match=r"built without RPC: reinstall it with .*-DGGML_RPC=ON"):
        rpc.check(["127.0.0.1:50052"])
    rpc.check([])  # no servers: nothing to support


def test_an_unreachable_server_is_named_with_the_reason() -> None:
    port = free_port()
    with pytest.raises(rpc.RpcError, match=rf"cannot connect to RPC server 127\.0\.0\.1:{port}: Connection refused"):
        rpc.probe(f"127.0.0.1:{port}")


# -- a real rpc-server ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def rpc_server_bin() -> Path:
    """``ggml-rpc-server`` of the installed llama-cpp-python's llama.cpp (built once, cached)."""
    r = subprocess.run(
        ["bash", str(ROOT / "tools" / "build-rpc-server.sh")], capture_output=True, text=True, timeout=1800
    )
    if r.returncode != 0:
        pytest.fail(f"could not build ggml-rpc-server for the RPC tests:\n{r.stderr.strip()}", pytrace=False)
    return Path(r.stdout.strip().splitlines()[-1])


class Server:
    def __init__(self, binary: Path, port: int) -> None:
        self.binary, self.port, self.endpoint = binary, port, f"127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(self.binary), "-H", "127.0.0.1", "-p", str(self.port), "-t", str(THREADS)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # listening: a bare TCP connect (a HELLO would count as a client)
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"ggml-rpc-server did not listen on {self.endpoint}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def server(rpc_server_bin: Path) -> Iterator[Server]:
    s = Server(rpc_server_bin, free_port())
    s.start()
    yield s
    s.kill()


def _spec(f32: Path, q41: Path, cache_dir: Path, target_rpc: tuple[str, ...]) -> EngineSpec:
    lp = LoadParams(n_ctx=1024, n_batch=256, n_ubatch=256, threads=THREADS, **EXACT)
    return EngineSpec(
        target=ModelSpec(f32, dataclasses.replace(lp, rpc=target_rpc)),
        draft=ModelSpec(q41, lp),  # the draft stays local (rpc = [] in the config)
        speculation=SpeculationSettings(n_draft=4, source="model"),
        cache_dir=cache_dir,
    )


def _reply(s: Speculator, prompt: str) -> tuple[list[StepVerified], ReplyFinished]:
    steps: list[StepVerified] = []
    fin = None
    for ev in s.run([{"role": "user", "content": prompt}], GREEDY):
        if isinstance(ev, StepVerified):
            steps.append(ev)
        elif isinstance(ev, ReplyFinished):
            fin = ev
    assert fin is not None
    return steps, fin


@pytest.fixture(scope="module")
def local_replies(smollm2_f32: Path, smollm2_q4_1: Path, cache_dir: Path) -> list[tuple[int, ...]]:
    s = load_speculator(_spec(smollm2_f32, smollm2_q4_1, cache_dir, ()))
    try:
        out = []
        for p in PROMPTS:
            s.forget()
            out.append(_reply(s, p)[1].token_ids)
        return out
    finally:
        s.close()


def test_target_on_the_rpc_device_replies_token_identical_to_local_with_speculation(
    server: Server, smollm2_f32: Path, smollm2_q4_1: Path, cache_dir: Path, local_replies: list[tuple[int, ...]]
) -> None:
    s = load_speculator(_spec(smollm2_f32, smollm2_q4_1, cache_dir, (server.endpoint,)))
    try:
        # the target's layers are on the server's device, the draft's are not
        assert [d.endpoint for d in s.target.remote_devices] == [server.endpoint]
        assert s.model_drafter is not None and s.model_drafter.cache.ctx.model.remote_devices == ()
        label = rpc.status_label([s.target])
        assert label.startswith("RPC") and label.endswith(f"@{server.endpoint}")
        for prompt, local in zip(PROMPTS, local_replies):
            s.forget()
            steps, fin = _reply(s, prompt)
            assert fin.reason == "max_tokens", fin.error
            assert fin.token_ids == local
            # speculation as usual: the draft proposed, the target accepted some
            assert fin.n_drafted > 0 and fin.n_accepted > 0
            assert any(st.proposed and st.n_accepted > 0 for st in steps)
    finally:
        s.close()


def test_target_split_over_two_servers_by_tensor_split_replies_token_identical_to_local(
    rpc_server_bin: Path, smollm2_f32: Path, smollm2_q4_1: Path, cache_dir: Path, local_replies: list[tuple[int, ...]]
) -> None:
    servers = [Server(rpc_server_bin, free_port()), Server(rpc_server_bin, free_port())]
    try:
        for srv in servers:
            srv.start()
        spec = _spec(smollm2_f32, smollm2_q4_1, cache_dir, tuple(srv.endpoint for srv in servers))
        spec = dataclasses.replace(
            spec, target=ModelSpec(smollm2_f32, dataclasses.replace(spec.target.load, tensor_split=(1.0, 2.0)))
        )
        s = load_speculator(spec)
        try:
            assert [d.endpoint for d in s.target.remote_devices] == [srv.endpoint for srv in servers]
            assert rpc.status_label([s.target]).count("@127.0.0.1:") == 2
            s.forget()
            _, fin = _reply(s, PROMPTS[0])
            assert fin.token_ids == local_replies[0]
        finally:
            s.close()
    finally:
        for srv in servers:
            srv.kill()


def test_wrong_port_is_a_clear_error_before_any_weights_load(
    smollm2_f32: Path, smollm2_q4_1: Path, cache_dir: Path
) -> None:
    port = free_port()
    stages: list[str] = []
    t0 = time.monotonic()
    with pytest.raises(rpc.RpcError, match=rf"cannot connect to RPC server 127\.0\.0\.1:{port}"):
        spec = _spec(smollm2_f32, smollm2_q4_1, cache_dir, (f"127.0.0.1:{port}",))
        load_speculator(spec, lambda stage, _f: stages.append(stage))
    assert not any(st.startswith("loading") for st in stages), stages
    assert time.monotonic() - t0 < 5


def test_server_killed_mid_reply_ends_it_with_an_error_naming_the_host_and_a_reload_works(
    server: Server, smollm2_f32: Path, smollm2_q4_1: Path, cache_dir: Path
) -> None:
    s = load_speculator(_spec(smollm2_f32, smollm2_q4_1, cache_dir, (server.endpoint,)))
    steps: list[StepVerified] = []
    fin = None
    gen = GenerationSettings(SamplingParams(temperature=0.0), max_tokens=200)
    for ev in s.run([{"role": "user", "content": PROMPTS[0]}], gen):
        if isinstance(ev, StepVerified):
            steps.append(ev)
            if len(steps) == 3:
                server.kill()
        elif isinstance(ev, ReplyFinished):
            fin = ev
    assert fin is not None and fin.reason == "error"
    assert f"RPC server {server.endpoint} stopped answering" in fin.error
    # what streamed before the loss is kept
    assert fin.n_tokens == sum(st.n_committed for st in steps) > 0
    assert rpc.speculator_lost(s)
    # the next reply fails at once with the same message, and closing does not hang
    t0 = time.monotonic()
    _, again = _reply(s, "Hello")
    assert again.reason == "error" and server.endpoint in again.error
    s.close()
    assert time.monotonic() - t0 < 5
    # the server is back: loading again connects afresh and works
    server.start()
    s2 = load_speculator(_spec(smollm2_f32, smollm2_q4_1, cache_dir, (server.endpoint,)))
    try:
        assert not rpc.speculator_lost(s2)
        _, fin2 = _reply(s2, PROMPTS[1])
        assert fin2.reason == "max_tokens" and fin2.n_tokens == GREEDY.max_tokens
    finally:
        s2.close()


def test_run_with_an_unreachable_server_exits_1_with_one_line(tmp_path: Path) -> None:
    port = free_port()
    r = subprocess.run(
        [sys.executable, "-m", "skippy_tui", "run", "Hi", "--rpc", f"127.0.0.1:{port}", "--max-tokens", "4"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"skippy-tui: error: cannot connect to RPC server 127.0.0.1:{port}: Connection refused"
    )


def test_app_names_the_remote_device_survives_the_server_dying_mid_reply_and_reloads_with_f5(
    server: Server, smollm2_f32: Path
) -> None:
    import asyncio
    import re

    from skippy_tui.config import Config
    from skippy_tui.ui.app import SkippyApp

    cfg = Config()
    for section, key, value in (
        ("generation", "max_tokens", 300),
        ("target", "threads", 1),
        ("target", "threads_batch", 1),
        ("target", "rpc", [server.endpoint]),
        ("draft", "rpc", []),  # the draft stays local
    ):
        cfg.set(section, key, value)

    async def until(pilot: object, cond: object, what: str, timeout: float = 180) -> None:
        t0 = time.monotonic()
        while not cond():  # type: ignore[operator]
            assert time.monotonic() - t0 < timeout, f"timed out waiting for {what}"
            await pilot.pause(0.05)  # type: ignore[attr-defined]

    def status(app: SkippyApp) -> str:
        return str(app.query_one("#status").render())

    async def body() -> None:
        app = SkippyApp(cfg)
        async with app.run_test(size=(160, 40)) as pilot:
            await until(pilot, lambda: app.speculator is not None, "the models to load")
            # where each model runs: the target on the server's device, the draft here
            assert re.search(rf"target RPC\d+@{re.escape(server.endpoint)} · draft CPU", status(app)), status(app)
            app.prompt.load_text("Tell me a long story about a dragon and a knight.")
            await pilot.press("enter")
            await until(pilot, lambda: app._current_entry is not None and len(app._current_entry.steps) >= 2, "steps")
            server.kill()
            await until(pilot, lambda: not app.generating, "the reply to end")
            # the conversation stays: the question and what streamed before the loss
            user, reply = app.transcript.entries[-2:]
            assert user.role == "user" and user.content.startswith("Tell me a long story")
            assert reply.finish is not None and reply.finish.reason == "error"
            assert f"RPC server {server.endpoint} stopped answering" in reply.finish.error
            assert reply.content == reply.finish.text and reply.content
            assert app.speculator is None and not app.loading  # unloaded, the app usable
            # the server is back: F5 loads again and the conversation goes on
            server.start()
            await pilot.press("f5")
            await until(pilot, lambda: app.speculator is not None, "the models to load again")
            app.generation = dataclasses.replace(app.generation, max_tokens=6)
            n = len(app.transcript.entries)
            app.prompt.load_text("Thanks!")
            await pilot.press("enter")
            await until(pilot, lambda: not app.generating and len(app.transcript.entries) == n + 2, "the next reply")
            fin = app.transcript.entries[-1].finish
            assert fin is not None and fin.reason in ("max_tokens", "eos") and fin.text

    asyncio.run(body())


def test_run_exits_1_with_one_line_when_the_server_dies_mid_reply(server: Server, smollm2_f32: Path) -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "skippy_tui", "run", "Tell me a long story about a dragon and a knight.",
         "--rpc", server.endpoint, "--temperature", "0", "--max-tokens", "400", "--n-ctx", "1024"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    assert p.stdout is not None
    streamed = b""
    while len(streamed) < 20:  # the reply is streaming
        chunk = p.stdout.read1(64)
        assert chunk, p.stderr.read().decode() if p.stderr else ""
        streamed += chunk
    server.kill()
    out, err = p.communicate(timeout=60)
    lines = err.decode().strip().splitlines()
    assert p.returncode == 1, err.decode()
    assert "Traceback" not in err.decode()
    assert lines[-1].startswith(f"skippy-tui: error: RPC server {server.endpoint} stopped answering")
    assert (streamed + out).strip()  # what streamed before the loss was written
