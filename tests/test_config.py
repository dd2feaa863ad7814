"""Config file: every key documented, bad input named precisely."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from skippy_tui.config import SCHEMA, Config, ConfigError, load_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "config.example.toml"


def test_the_example_config_loads_and_documents_every_key() -> None:
    cfg = load_config(EXAMPLE)
    text = EXAMPLE.read_text("utf-8")
    for section, keys in SCHEMA.items():
        parts = re.split(rf"^\[{section}\]$", text, flags=re.M)
        assert len(parts) == 2, section
        body = parts[1].split("\n[", 1)[0]
        for key in keys:
            assert re.search(rf"^#? ?{key} =", body, re.M) or section == "draft", f"{section}.{key} undocumented"
    # values in the example are the defaults
    for section, keys in SCHEMA.items():
        for key, default in keys.items():
            assert cfg.get(section, key) == default, (section, key)
    cfg.engine_spec()
    cfg.generation()


@pytest.mark.parametrize(
    ("toml", "pattern"),
    [
        ("[speculation]\nn_draft = 0\n", r"config\.toml: n_draft = 0 is out of bounds: must be in 1\.\.4096 or \"auto"),
        ("[speculation]\np_min = 1.5\n", r"p_min = 1\.5 is out of bounds"),
        ("[speculation]\nn_draft = 'lots'\n", r"\[speculation\] n_draft = 'lots'.*integer or \"auto\""),
        ("[target]\nn_ctx = 'big'\n", r"\[target\] n_ctx = 'big' is not allowed: expected an integer"),
        ("[target]\nflash_attn = 'maybe'\n", r"target\.flash_attn = 'maybe' .*one of auto, on, off"),
        ("[target]\ncache_type_k = 'q3'\n", r"target\.cache_type_k = 'q3'"),
        ("[draft]\nthreads = -2\n", r"draft\.threads = -2 is out of bounds"),
        ("[target]\nmmap = 1\n", r"\[target\] mmap = 1 is not allowed: expected true/false"),
        ("[target]\nnctx = 4\n", r"unknown key \[target\] nctx; allowed: path, chat_template, n_ctx"),
        ("[models]\nx = 1\n", r"unknown section \[models\]"),
        ("[sampling]\ntemperature = -1\n", r"temperature = -1\.0 is out of bounds"),
        ("[generation]\nstop = [1, 2]\n", r"\[generation\] stop = \[1, 2\] is not allowed: expected a list of strings"),
        ("[generation]\nstop = 'x'\n", r"\[generation\] stop = 'x' is not allowed: expected a list$"),
        (
            "[target]\ntensor_split = [-1, 'a']\n",
            r"tensor_split = \[-1, 'a'\] is not allowed: expected a list of numbers",
        ),
        ("[target\n", r"config\.toml: invalid TOML"),
    ],
)
def test_bad_values_name_file_key_value_and_bound(tmp_path: Path, toml: str, pattern: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(toml, "utf-8")
    with pytest.raises(ConfigError) as info:
        cfg = load_config(path)
        cfg.engine_spec()
        cfg.generation()
    assert re.search(pattern, str(info.value)), str(info.value)
    assert str(path) in str(info.value)


def test_a_missing_explicit_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")


def test_no_config_file_means_defaults() -> None:
    cfg = load_config(None)  # the isolated user config dir holds none
    assert cfg.source is None
    spec = cfg.engine_spec()
    assert spec.target.path is None  # the embedded default pair
    assert (spec.speculation.n_draft, spec.speculation.source) == ("auto", "auto")  # every pair, the demo one too


def test_the_draft_inherits_target_keys_unless_set(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[target]\npath = "/m/t.gguf"\nn_ctx = 2048\nthreads = 2\nmlock = true\n'
        '[draft]\npath = "/m/d.gguf"\nthreads = 1\ncache_type_k = "q8_0"\n',
        "utf-8",
    )
    spec = load_config(path).engine_spec()
    d = spec.draft.load
    assert (d.n_ctx, d.mlock, d.threads, d.cache_type_k) == (2048, True, 1, "q8_0")
    assert spec.target.load.cache_type_k == "f16"
    # flash attention alone defaults per model: the draft's logits never decide a token
    assert (spec.target.load.flash_attn, d.flash_attn) == ("off", "auto")
    path.write_text('[target]\npath = "/m/t.gguf"\n[draft]\npath = "/m/d.gguf"\nflash_attn = "off"\n', "utf-8")
    assert load_config(path).engine_spec().draft.load.flash_attn == "off"
    assert spec.speculation.n_draft == "auto"  # configured pairs default to adaptive k


def test_a_bad_flag_value_is_blamed_on_the_flag_not_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[speculation]\np_min = 0.2\n", encoding="utf-8")
    cfg = load_config(path)
    cfg.set("speculation", "n_draft", 0, "--n-draft")
    with pytest.raises(ConfigError, match=r"^--n-draft: n_draft = 0 is out of bounds") as e:
        cfg.engine_spec()
    assert e.value.origin == "--n-draft" and str(path) not in str(e.value)
    with pytest.raises(ConfigError, match=r"^--max-tokens: \[generation\] max_tokens = 'x'") as e:
        cfg.set("generation", "max_tokens", "x", "--max-tokens")
    path.write_text("[speculation]\nn_draft = 0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: n_draft = 0")) as e:
        load_config(path).engine_spec()
    assert e.value.origin == ""


def test_the_fast_profile_turns_on_flash_attention_and_repacking_unless_set(tmp_path: Path) -> None:
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('[speculation]\nprofile = "fast"\n')
    spec = load_config(cfg_file).engine_spec()
    assert spec.speculation.profile == "fast" and not spec.speculation.exact
    assert spec.target.load.flash_attn == "auto" and spec.target.load.repack
    assert spec.draft is not None and spec.draft.load.flash_attn == "auto" and spec.draft.load.repack
    # a key set in the file wins over the profile, for the target and for the draft
    cfg_file.write_text('[speculation]\nprofile = "fast"\n[target]\nrepack = false\n[draft]\nflash_attn = "off"\n')
    spec = load_config(cfg_file).engine_spec()
    assert not spec.target.load.repack and spec.target.load.flash_attn == "auto"
    assert spec.draft is not None and spec.draft.load.flash_attn == "off" and not spec.draft.load.repack
    # the default profile (auto) and exact load as before: the probe needs the batch-invariant settings
    for cfg in (Config(), load_config(_written(cfg_file, '[speculation]\nprofile = "exact"\n'))):
        spec = cfg.engine_spec()
        assert spec.speculation.profile in ("auto", "exact") and spec.speculation.exact
        assert spec.target.load.flash_attn == "off" and not spec.target.load.repack
    assert Config().engine_spec().speculation.profile == "auto"


def _written(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_bad_profile_is_refused_with_its_choices(tmp_path: Path) -> None:
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('[speculation]\nprofile = "turbo"\n')
    with pytest.raises(ConfigError, match=r"profile.*turbo.*auto, exact, fast"):
        load_config(cfg_file).engine_spec()


def test_every_bad_key_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[speculation]\nn_draft = 0\np_min = 1.5\nn_min = 9\n[sampling]\ntop_p = 2.0\n", "utf-8")
    cfg = load_config(path)
    for build in (cfg.engine_spec, cfg.generation):
        with pytest.raises(ConfigError) as info:
            build()
        lines = str(info.value).splitlines()
        assert len(lines) == 4, lines
        for key, value in (("n_draft", "0"), ("p_min", "1.5"), ("n_min", "9"), ("top_p", "2.0")):
            assert any(line.startswith(f"{path}: {key} = {value} is out of bounds") for line in lines), (key, lines)
    # one bad key: one line, as before
    path.write_text("[speculation]\np_min = 1.5\n", "utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path).engine_spec()
    assert len(str(info.value).splitlines()) == 1


def test_a_bad_key_judged_against_another_is_reported_once(tmp_path: Path) -> None:
    """n_min = 10 with n_draft = 4 is out of 0..4; checked alone (n_draft auto, k up to 8) it
    is out of 0..8 too, and both lines were printed, the second contradicting the first."""
    path = tmp_path / "config.toml"
    path.write_text("[speculation]\nn_draft = 4\nn_min = 10\n", "utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path).engine_spec()
    assert str(info.value).splitlines() == [f"{path}: n_min = 10 is out of bounds: must be in 0..4"]
    # another bad key still gets its own line
    path.write_text("[speculation]\nn_draft = 4\nn_min = 10\np_min = 3.0\n", "utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path).engine_spec()
    lines = str(info.value).splitlines()
    assert len(lines) == 2 and "n_min = 10" in lines[0] and "p_min = 3.0" in lines[1], lines


def test_a_model_source_asked_for_without_a_draft_model_is_refused(tmp_path: Path) -> None:
    """``--no-draft --draft-source model`` quietly decoded plainly; a source that drafts with
    a model, asked for by flag, now needs one. A later change without a flag (the F8
    picker's "none" sets source = model, draft off) is no longer the flag's and loads."""
    cfg = Config()
    cfg.set("draft", "enabled", False, "--no-draft")
    cfg.set("speculation", "source", "ngram+model", "--draft-source")
    with pytest.raises(
        ConfigError, match=r"^--draft-source ngram\+model needs a draft model \(--no-draft turns it off\)"
    ):
        cfg.engine_spec()
    cfg.set("speculation", "source", "model")  # as the picker's "none" does
    assert not cfg.engine_spec().speculation.enabled
    cfg.set("speculation", "source", "ngram", "--draft-source")  # n-gram drafting needs no model
    assert cfg.engine_spec().speculation.enabled
    path = tmp_path / "config.toml"
    path.write_text(f'[target]\npath = "{tmp_path / "t.gguf"}"\n', "utf-8")
    cfg = load_config(path)  # a configured target and no draft path
    cfg.set("speculation", "source", "model", "--draft-source")
    with pytest.raises(ConfigError, match=r"\(the configured target has none: pass --draft or set \[draft\] path\)"):
        cfg.engine_spec()


def test_a_target_with_mtp_heads_drafts_with_them_by_default(tmp_path: Path, tiny_models) -> None:
    """No draft path: a target whose file has MTP heads speculates (source auto) with them;
    --no-draft turns them off; source mtp on a target without heads is refused by flag."""
    path = tmp_path / "config.toml"
    path.write_text(f'[target]\npath = "{tiny_models("qwen35", mtp=1)}"\n', "utf-8")
    spec = load_config(path).engine_spec()
    assert spec.speculation.enabled and spec.speculation.source == "auto" and spec.heads and not spec.use_draft
    cfg = load_config(path)
    cfg.set("draft", "enabled", False, "--no-draft")
    spec = cfg.engine_spec()
    assert not spec.speculation.enabled and not spec.heads
    path.write_text(f'[target]\npath = "{tiny_models("qwen35")}"\n', "utf-8")
    assert not load_config(path).engine_spec().speculation.enabled  # nothing to draft with
    cfg = load_config(path)
    cfg.set("speculation", "source", "mtp", "--draft-source")
    with pytest.raises(ConfigError, match=r"^--draft-source mtp needs the target.s MTP heads .*\(its file has none"):
        cfg.engine_spec()


def test_source_mtp_loads_the_targets_heads_without_a_draft_file(tmp_path: Path) -> None:
    """``source = "mtp"`` (set in the file, by ``--draft-source mtp`` or by F8's "integrated MTP")
    drafts with the target's own heads: a draft is asked for (``use_draft``), with no file."""
    from skippy_tui.cli_common import add_model_flags, config_from_args

    path = tmp_path / "config.toml"
    path.write_text(f'[target]\npath = "{tmp_path / "t.gguf"}"\n[speculation]\nsource = "mtp"\n', "utf-8")
    spec = load_config(path).engine_spec()
    assert (spec.draft, spec.use_draft, spec.heads) == (None, False, True)
    assert (spec.speculation.source, spec.speculation.enabled) == ("mtp", True)
    # an MTP drafter file as the draft is a draft like any other
    path.write_text(path.read_text("utf-8") + f'[draft]\npath = "{tmp_path / "mtp.gguf"}"\n', "utf-8")
    spec = load_config(path).engine_spec()
    assert spec.draft is not None and spec.draft.path == tmp_path / "mtp.gguf" and spec.use_draft
    # the flag takes it; with --no-draft it would quietly decode plainly, so it is refused
    import argparse

    parser = argparse.ArgumentParser()
    add_model_flags(parser)
    args = parser.parse_args(["--target", str(tmp_path / "t.gguf"), "--draft-source", "mtp"])
    spec = config_from_args(args).engine_spec()
    assert spec.speculation.source == "mtp" and spec.heads and spec.draft is None
    args = parser.parse_args(["--target", str(tmp_path / "t.gguf"), "--no-draft", "--draft-source", "mtp"])
    with pytest.raises(ConfigError, match=r"^--draft-source mtp needs the target's MTP heads .*\(--no-draft turns"):
        config_from_args(args).engine_spec()
    path.write_text('[speculation]\nsource = "heads"\n', "utf-8")
    with pytest.raises(ConfigError, match=r"source = 'heads' is out of bounds: .*ngram\+model, mtp"):
        load_config(path).engine_spec()


def test_a_draft_that_is_the_target_s_file_loads_with_the_target_s_numeric_settings(tmp_path: Path) -> None:
    """Flash attention "auto" is the draft's own default, except for the target's own file
    (here through a link) or when asked for (``like_target``): there the draft's kernels
    must be the target's, or their rounding reads as disagreement."""
    target, other = tmp_path / "target.gguf", tmp_path / "other.gguf"
    target.write_bytes(b"GGUF")
    other.write_bytes(b"GGUF")
    (tmp_path / "link.gguf").symlink_to(target)

    def draft_load(draft: Path, **keys: object):
        cfg = Config()
        cfg.set("target", "path", str(target))
        cfg.set("draft", "path", str(draft))
        for key, value in keys.items():
            cfg.set("draft", key, value)
        spec = cfg.engine_spec()
        assert spec.target.load.flash_attn == "off"
        return spec.draft.load

    assert draft_load(other).flash_attn == "auto"
    assert draft_load(target).flash_attn == "off"
    assert draft_load(tmp_path / "link.gguf").flash_attn == "off"
    assert draft_load(other, like_target=True).flash_attn == "off"
    assert draft_load(target, flash_attn="on").flash_attn == "on"  # a key the draft sets itself still wins
    with pytest.raises(ConfigError, match=r"like_target = 'yes' is not allowed: expected true/false"):
        draft_load(other, like_target="yes")


# -- settings saved from the app (issue 57.6) ----------------------------------------------------


def test_saved_settings_sit_under_the_config_file_and_only_the_app_reads_them() -> None:
    from skippy_tui.config import config_path, read_saved, saved_path
    from skippy_tui.saved import overridden, save_defaults

    saved = {
        "sampling": {"temperature": 0.5, "seed": 7},
        "generation": {"system_prompt": 'Say "hi"\n\ttabbed \\ é \x7f end', "max_tokens": 33},
        "target": {"path": "/m/t.gguf"},
    }
    assert save_defaults(saved) == saved_path()
    assert read_saved() == saved  # every character back, DEL included
    save_defaults({"speculation": {"n_draft": 3}})  # merged into what was saved
    assert read_saved()["sampling"]["temperature"] == 0.5 and read_saved()["speculation"] == {"n_draft": 3}
    assert load_config().get("sampling", "temperature") == 0.0  # run and bench: not read
    cfg = load_config(saved=True)
    assert (cfg.get("sampling", "temperature"), cfg.get("generation", "max_tokens")) == (0.5, 33)
    assert cfg.get("speculation", "n_draft") == 3 and cfg.generation().sampling.seed == 7
    # the config file wins, and the app can say which saved keys it hides
    config_path().parent.mkdir(parents=True, exist_ok=True)
    config_path().write_text("# mine\n[sampling]\ntemperature = 0.7\n", "utf-8")
    cfg = load_config(saved=True)
    assert cfg.get("sampling", "temperature") == 0.7 and cfg.get("generation", "max_tokens") == 33
    assert overridden(cfg, saved) == ["[sampling] temperature = 0.7"]
    assert config_path().read_text("utf-8") == "# mine\n[sampling]\ntemperature = 0.7\n"  # never written


def test_a_bad_saved_file_is_named_and_a_failed_save_keeps_the_old_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from skippy_tui.config import read_saved, saved_path
    from skippy_tui.saved import save_defaults

    save_defaults({"sampling": {"temperature": 0.5}})
    before = saved_path().read_text("utf-8")

    def full_disk(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, "replace", full_disk)
        with pytest.raises(ConfigError, match=r"cannot save the settings to .*No space left"):
            save_defaults({"sampling": {"temperature": 0.9}})
    assert saved_path().read_text("utf-8") == before  # whole, as it was
    assert [p.name for p in saved_path().parent.iterdir()] == ["saved.toml"]  # no temporary file left
    with pytest.raises(ConfigError, match="not a setting the app saves"):
        save_defaults({"ui": {"theme": "x"}})
    saved_path().write_text("[sampling]\ntemperature = 'hot'\n", "utf-8")
    with pytest.raises(
        ConfigError, match=r"(?s)saved\.toml: \[sampling\] temperature = 'hot'.*delete saved\.toml"
    ) as bad:
        load_config(saved=True)
    from skippy_tui.ui.screens.error import how_to_fix

    assert how_to_fix(bad.value, "config.toml").startswith(f"Delete {saved_path()}: it holds only what the app saved")
    save_defaults({"sampling": {"top_k": 5}})  # a bad file is the app's own: saving again replaces it
    assert read_saved() == {"sampling": {"top_k": 5}}
