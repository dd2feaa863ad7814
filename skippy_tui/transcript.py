"""Transcripts: a conversation with every engine event, saved as JSON and Markdown.

The JSON file is the record (messages, every step event in the engine's own
``to_dict`` shape, both models' GGUF metadata, the config, versions); the
Markdown file is derived from it, for reading, with per-reply stats. It is
written second, so a crash between the two writes leaves a stale ``.md``
beside a good ``.json``: opening it rebuilds the ``.md`` whenever it differs.
``Transcript.from_dict(t.to_dict()) == t``, so a saved transcript reloads
equal.

Each turn keeps what it was sent with. ``system_prompt`` is the system prompt
the chat started with; a change made later is a ``system`` message at the point
it was made, which applies to the turns after it (the turns before keep theirs,
and are sent again as they were). Each reply records its sampling settings (its
``reply_started`` event) and the model pair that made it (the message's
``models``). These are additions to format 1 that older readers skip or read as
plain messages, and a file written before them (no ``models`` per reply, no
system messages) reads as one whose system prompt never changed.

Files are written atomically (temporary file in the same folder, fsync,
rename) in UTF-8. No UI imports here: the app, ``skippy-tui replay``
and tests all use this module.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import platform
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from .engine.errors import SkippyError
from .engine.events import Event, ReplyFinished, ReplyStarted, Rollback, StepVerified, TextSpan, event_from_dict
from .engine.jsoncache import atomic_write_text, exclusive_write_text, remove_stale_temps
from .engine.load.labels import model_label
from .engine.policy.exactness import NOT_BIT_EXACT
from .engine.sampling.params import SamplingParams
from .engine.stats import AcceptanceStats

FORMAT = "skippy-tui-transcript"
FORMAT_VERSION = 1


def not_json(e: json.JSONDecodeError) -> str:
    """One line for a file that is not JSON: ``not JSON (<reason>: line L column C)``."""
    return f"not JSON ({e.msg}: line {e.lineno} column {e.colno})"


class TranscriptError(SkippyError):
    """A transcript file is missing, unreadable, not JSON, or not a transcript."""


@dataclass
class Entry:
    """One chat message; an assistant reply also holds the events that made it and the model
    pair it came from (:func:`model_pair`; None when not recorded). A ``system`` entry is
    the system prompt changed there ("" = cleared)."""

    role: str
    content: str
    events: list[Event] = field(default_factory=list)
    models: dict[str, Any] | None = None

    @property
    def started(self) -> ReplyStarted | None:
        return next((e for e in self.events if isinstance(e, ReplyStarted)), None)

    @property
    def steps(self) -> list[StepVerified]:
        return [e for e in self.events if isinstance(e, StepVerified)]

    @property
    def finish(self) -> ReplyFinished | None:
        return next((e for e in reversed(self.events) if isinstance(e, ReplyFinished)), None)

    def spans(self) -> list[TextSpan]:
        """The reply's text by origin (draft/target), tail included."""
        out = [s for st in self.steps for s in st.delta]
        fin = self.finish
        if fin is not None and fin.tail:
            out.append(TextSpan(fin.tail, "target"))
        return out

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.models is not None:
            d["models"] = self.models
        if self.events:
            d["events"] = [e.to_dict() for e in self.events]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Entry:
        """Raises: ValueError for a role or content that is not a string, or a malformed event."""
        role, content = d["role"], d["content"]
        if role not in ("user", "assistant", "system"):
            raise ValueError(f'"role" must be "user", "assistant" or "system", not {role!r}')
        if not isinstance(content, str):
            raise ValueError(f'"content" must be a string, not {type(content).__name__}')
        events = d.get("events", [])
        if not isinstance(events, list):
            raise ValueError('"events" must be a JSON list')
        models = d.get("models")
        if models is not None and not isinstance(models, dict):
            raise ValueError(f'"models" must be a JSON object, not {type(models).__name__}')
        return cls(role, content, [event_from_dict(e) for e in events], models)


@dataclass
class Transcript:
    """A conversation and where it came from."""

    entries: list[Entry] = field(default_factory=list)
    system_prompt: str = ""
    models: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    created: str = ""
    title: str = ""  # set by a rename in the chat history; "" = named by its first message

    def engine_messages(self) -> list[dict[str, str]]:
        """What :meth:`Speculator.run` takes: the system prompt the chat started with (if any),
        then the messages, each system prompt change where it was made. A cleared system prompt
        sends nothing (the one before stays where it was sent)."""
        out = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return out + [{"role": e.role, "content": e.content} for e in self.entries if e.role != "system" or e.content]

    # -- the system prompt, per turn ----------------------------------------------------

    def system_at(self, index: int) -> str:
        """The system prompt in force at entry ``index``: the last change before it, else the
        one the chat started with."""
        return next((e.content for e in reversed(self.entries[:index]) if e.role == "system"), self.system_prompt)

    @property
    def current_system(self) -> str:
        """The system prompt the next message is sent with."""
        return self.system_at(len(self.entries))

    def set_system(self, text: str) -> None:
        """Change the system prompt from the next message on; the turns sent before keep
        theirs. With no message yet it is the chat's own; after one, a system message where
        the change is made (replacing one made since the last message)."""
        while self.entries and self.entries[-1].role == "system":
            self.entries.pop()
        if not self.entries:
            self.system_prompt = text
        elif text != self.current_system:
            self.entries.append(Entry("system", text))

    def pending_system(self) -> str | None:
        """A system prompt set since the last message (sent with none yet), or None."""
        last = self.entries[-1] if self.entries else None
        return last.content if last is not None and last.role == "system" else None

    def cut(self, index: int) -> list[Entry]:
        """Drop the entries from ``index`` on (an edit or a regenerate sends the turn again);
        a system prompt set after them stays, for what is sent next. Returns what was dropped."""
        pending = self.pending_system()
        dropped = self.entries[index:]
        del self.entries[index:]
        if pending is not None:
            self.set_system(pending)
        return dropped

    def replies(self) -> list[Entry]:
        return [e for e in self.entries if e.role == "assistant"]

    def conversation(self) -> dict[str, Any]:
        """What was said, as JSON: the system prompt and the messages with their events
        (not the models, config, versions or title a save records beside them)."""
        return {"system_prompt": self.system_prompt, "messages": [e.to_dict() for e in self.entries]}

    # -- JSON ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "created": self.created,
            "versions": self.versions,
            "models": self.models,
            "config": self.config,
            "system_prompt": self.system_prompt,
            "messages": [e.to_dict() for e in self.entries],
        } | ({"title": self.title} if self.title else {})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Transcript:
        """Rebuild from :meth:`to_dict` output.

        Raises:
            TranscriptError: not a transcript, or a newer format, or a malformed event.
        """
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise TranscriptError('not a skippy-tui transcript (no "format": "skippy-tui-transcript")')
        version = d.get("format_version", 0)
        if not isinstance(version, int) or isinstance(version, bool):
            raise TranscriptError(f'"format_version" must be a whole number, not {version!r}')
        if version > FORMAT_VERSION:
            raise TranscriptError(f"transcript format {version} is newer than this skippy-tui reads ({FORMAT_VERSION})")
        for key in ("models", "config", "versions"):
            if not isinstance(d.get(key) or {}, dict):
                raise TranscriptError(f'"{key}" must be a JSON object, not {type(d[key]).__name__}')
        if not isinstance(d.get("messages", []), list):
            raise TranscriptError('"messages" must be a JSON list')
        system = d.get("system_prompt") or ""
        if not isinstance(system, str):
            raise TranscriptError(f'"system_prompt" must be a string, not {type(system).__name__}')
        title = d.get("title") or ""
        if not isinstance(title, str):
            raise TranscriptError(f'"title" must be a string, not {type(title).__name__}')
        # JSON may escape half a surrogate pair ("\\ud800"), which no UTF-8 save could write back
        d = _without_lone_surrogates(d)
        try:
            entries = [Entry.from_dict(m) for m in d.get("messages", [])]
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise TranscriptError(f"malformed message in transcript: {type(e).__name__}: {e}") from e
        return cls(
            entries=entries,
            system_prompt=d.get("system_prompt") or "",
            models=dict(d.get("models") or {}),
            config=dict(d.get("config") or {}),
            versions=dict(d.get("versions") or {}),
            created=str(d.get("created", "")),
            title=d.get("title") or "",
        )

    # -- Markdown --------------------------------------------------------------------

    def to_markdown(self) -> str:
        lines = [f"# skippy-tui transcript — {self.created or 'unsaved'}", ""]
        for role in ("target", "draft"):
            m = self.models.get(role)
            if m:
                lines.append(f"- **{role}**: {m.get('name', '?')} ({m.get('file_type', '?')}), `{m.get('path', '')}`")
        if self.models.get("backend"):
            lines.append(f"- **backend**: {self.models['backend']}")
        if self.system_prompt:
            lines += ["", "## System", "", self.system_prompt]
        pair = self.models
        verify = "exact"  # said only where a reply's verification stops (or starts again) being bit-exact
        for e in self.entries:
            if e.role == "system":  # changed here: the turns above were sent with the one before
                lines += ["", "## System (changed)", "", e.content or "_(cleared)_"]
                continue
            lines += ["", f"## {'You' if e.role == 'user' else e.role.capitalize()}", "", e.content]
            if e.role == "assistant" and e.finish is not None:
                lines += ["", f"> {reply_summary(e.finish)}"]
                steps = steps_summary(e.steps)
                if steps:
                    lines += [">", f"> {steps}"]
                sampling = sampling_summary(e)
                if sampling:
                    lines += [">", f"> {sampling}"]
                said = e.started.verify if e.started is not None else ""
                if said and said.startswith("exact") != verify.startswith("exact"):
                    lines += [">", f"> verify: {verify_text(said)}"]
                    verify = said
            if e.models is not None:
                if models_label(e.models) != models_label(pair):  # another pair from this reply on
                    lines += [">", f"> models: {models_label(e.models)}"]
                pair = e.models
        return "\n".join(lines).rstrip() + "\n"

    # -- files -----------------------------------------------------------------------

    def save(self, json_path: Path) -> tuple[Path, Path]:
        """Write ``json_path`` and the ``.md`` beside it, atomically. Returns both paths.

        Raises:
            TranscriptError: the folder cannot be created or written.
        """
        json_path = Path(json_path)
        self._write(json_path, atomic_write_text)
        return json_path, json_path.with_suffix(".md")

    def save_new(self, folder: Path) -> tuple[Path, Path]:
        """Save under a fresh ``chat-YYYYmmdd-HHMMSS[-N].json`` in ``folder``, never over a file
        that is there: two processes saving at the same moment each get their own name.
        Returns both paths.

        Raises:
            TranscriptError: the folder cannot be created or written.
        """
        for path in transcript_names(folder):
            if not path.with_suffix(".md").exists() and self._write(path, exclusive_write_text):
                return path, path.with_suffix(".md")
        raise AssertionError("unreachable: transcript_names never ends")

    def _write(self, json_path: Path, write: Callable[[Path, str], bool | None]) -> bool:
        """The JSON through ``write`` (False: it wrote nothing, the name was taken), then the
        Markdown beside it. Returns whether it wrote.

        Raises:
            TranscriptError: the folder cannot be created or written.
        """
        if not self.created:
            self.created = now_iso()
        try:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            if json_path.parent not in _SWEPT:  # once per folder and process: a save killed mid-write left them
                remove_stale_temps(json_path.parent)
                _SWEPT.add(json_path.parent)
            # a lone surrogate (pasted, or from an old file) must not make the save raise: one pass over the text
            text = json.dumps(self.to_dict(), ensure_ascii=False, indent=1) + "\n"
            if write(json_path, _LONE_SURROGATE.sub("\ufffd", text)) is False:
                return False
            atomic_write_text(json_path.with_suffix(".md"), _LONE_SURROGATE.sub("\ufffd", self.to_markdown()))
        except OSError as e:
            raise TranscriptError(f"cannot write transcript {json_path}: {e.strerror or e}") from e
        return True

    @classmethod
    def load(cls, path: Path, *, repair_markdown: bool = False) -> Transcript:
        """Read a saved ``.json`` transcript; with ``repair_markdown`` (the app and ``replay``
        opening a user's file), also rebuild a stale or missing ``.md`` beside it.

        Raises:
            TranscriptError: missing, unreadable, not JSON, or not a transcript.
        """
        path = Path(path).expanduser()
        try:
            text = path.read_text("utf-8")
        except FileNotFoundError:
            raise TranscriptError(f"transcript not found: {path}") from None
        except OSError as e:
            raise TranscriptError(f"cannot read transcript {path}: {e.strerror or e}") from e
        except UnicodeDecodeError as e:
            raise TranscriptError(f"{path}: not UTF-8 text ({e.reason})") from e
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TranscriptError(f"{path}: {not_json(e)}") from e
        try:
            transcript = cls.from_dict(data)
        except TranscriptError as e:
            raise TranscriptError(f"{path}: {e}") from e
        if repair_markdown:
            transcript.repair_markdown(path)
        return transcript

    def repair_markdown(self, json_path: Path) -> bool:
        """Rewrite the ``.md`` beside ``json_path`` if it is missing or differs from this
        transcript's Markdown (the ``.json`` is the record). Returns whether it was rewritten.

        A folder that cannot be written is not an error here: the transcript loaded.
        """
        md_path = Path(json_path).with_suffix(".md")
        expected = _LONE_SURROGATE.sub("\ufffd", self.to_markdown())
        try:
            if md_path.read_text("utf-8") == expected:
                return False
        except (OSError, UnicodeDecodeError):
            pass  # missing or unreadable: rebuild it
        try:
            atomic_write_text(md_path, expected)
        except OSError:
            return False
        return True


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_SWEPT: set[Path] = set()  # transcript folders already cleared of stale temp files


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings replaced by U+FFFD."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    return value


def model_pair(target: Mapping[str, Any] | None, draft: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a reply records of the models that made it: each one's path, GGUF name and
    quantization (from ``ModelInfo.summary()``); ``draft`` None without a draft model."""

    def one(m: Mapping[str, Any] | None) -> dict[str, Any] | None:
        return None if m is None else {k: m.get(k) for k in ("path", "name", "file_type")}

    return {"target": one(target), "draft": one(draft)}


def models_label(models: Mapping[str, Any] | None) -> str:
    """``target SmolLM2-135M-Instruct F32 · draft SmolLM2-135M-Instruct Q4_1`` ("no draft"
    without one); "" for nothing recorded."""
    if not models or not isinstance(models.get("target"), Mapping):
        return ""
    parts = []
    for role in ("target", "draft"):
        m = models.get(role)
        if isinstance(m, Mapping):
            parts.append(f"{role} {model_label(m.get('path'), str(m.get('name', '?')), str(m.get('file_type') or ''))}")
        else:
            parts.append("no draft")
    return " · ".join(parts)


def count(n: int, noun: str) -> str:
    """``1 step``, ``2 steps``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def reply_summary(fin: ReplyFinished) -> str:
    """One line of per-reply stats (Markdown transcript, chat pane)."""
    parts = [count(fin.n_tokens, "token"), count(fin.n_steps, "step")]
    if fin.n_drafted:
        parts += [f"acceptance {fin.acceptance_rate:.1%}", f"mean accepted length {fin.mean_accepted_length:.2f}"]
    parts += [f"{fin.tokens_per_second:.1f} tok/s", f"finished: {fin.reason}"]
    if fin.error:
        parts.append(fin.error)
    return " · ".join(parts)


def steps_summary(steps: list[StepVerified]) -> str:
    """One line on a reply's steps (Markdown transcript): what drafted them, and how the
    target's cache dropped what it did not commit, e.g. ``steps by source: 6 mtp, 2 plain · target
    rollbacks: 3 rollback (5 rows); 0.4 ms``. ``""`` without steps.

    A proposal whose source was not recorded counts as ``?``; transcripts from before
    rollbacks were recorded say nothing of them."""
    if not steps:
        return ""
    sources: dict[str, int] = {}
    for st in steps:
        name = st.draft_source or ("?" if st.proposed else "plain")
        sources[name] = sources.get(name, 0) + 1
    text = "steps by source: " + ", ".join(f"{n} {name}" for name, n in sources.items())
    rollbacks = [st.rollback for st in steps if st.rollback is not None]
    if rollbacks:
        text += " · target rollbacks: " + _rollbacks(rollbacks)
    return text


def _rollbacks(rollbacks: list[Rollback]) -> str:
    """``3 drop (7 rows), 1 restore (2 rows, 1 decoded again); 0.5 ms``: by kind, then the time in all."""
    kinds: dict[str, list[Rollback]] = {}
    for rb in rollbacks:
        kinds.setdefault(rb.label().split()[0], []).append(rb)
    parts = []
    for verb, group in kinds.items():
        dropped, again = sum(rb.dropped for rb in group), sum(rb.redecoded for rb in group)
        detail = count(dropped, "row") if verb != "reset" else ""
        if again:
            detail += (", " if detail else "") + f"{again} decoded again"
        parts.append(f"{len(group)} {verb} ({detail})")
    return ", ".join(parts) + f"; {sum(rb.ms for rb in rollbacks):.1f} ms"


# the SamplingParams fields a recorded settings dict holds, and their defaults
_SAMPLING_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SamplingParams) if f.name != "seed"}


def sampling_label(settings: Mapping[str, Any]) -> str:
    """Recorded sampling settings in a few words: ``coupled T=0.8``, ``greedy``,
    then the filters and penalties that differ from the defaults.

    Settings recorded before the sampler was (no ``sampler`` key) say ``T=0.8``.
    """
    t = settings.get("temperature", 0.0)
    if not t:
        head = "greedy"
    elif "sampler" in settings:
        head = f"{settings['sampler']} T={number(t)}"
    else:
        head = f"T={number(t)}"
    extra = [
        f"{key} {number(settings[key])}"
        for key, default in _SAMPLING_DEFAULTS.items()
        if key not in ("temperature", "sampler") and key in settings and settings[key] != default
    ]
    return ", ".join([head, *extra])


def reply_seed(started: ReplyStarted | None) -> tuple[int, bool] | None:
    """The reply's seed and whether it was fixed (rather than drawn for the reply);
    None for a transcript from before seeds were recorded per reply."""
    settings = started.sampling if started is not None else {}
    seed = settings.get("seed")
    if "seed_fixed" not in settings or not isinstance(seed, int):
        return None
    return seed, bool(settings["seed_fixed"])


def reproduce_flags(started: ReplyStarted | None) -> str:
    """The flags that sample the reply again: ``--seed N`` and every setting that
    differs from the default (those it started with); "" without a recorded seed.

    The rejection sampler's draws depend on each step's k, so its flags also fix
    ``--n-draft`` (a reply under ``auto`` cannot be pinned: its k follows timings).
    """
    seed = reply_seed(started)
    if seed is None or started is None:
        return ""
    flags = [f"--seed {seed[0]}"]
    for key, default in _SAMPLING_DEFAULTS.items():
        value = started.sampling.get(key, default)
        if value != default:
            flags.append(f"--{key.replace('_', '-')} {number(value)}")
    s = started.sampling
    if s.get("sampler") == "rejection" and s.get("temperature") and isinstance(started.n_draft, int):
        flags.append(f"--n-draft {started.n_draft}")
    return " ".join(flags)


def reproduce_note(started: ReplyStarted | None, steps: list[StepVerified]) -> str:
    """What limits :func:`reproduce_flags`, as words after "reproduces it"; "" for nothing."""
    changes = sampling_changes(steps)
    if changes:
        return f"up to step {changes[0].index}, where the settings changed"
    s = started.sampling if started is not None else {}
    if started is not None and s.get("sampler") == "rejection" and s.get("temperature") and started.n_draft == "auto":
        return "only roughly: the rejection sampler's draws follow each step's k, which auto picks by timing"
    return ""


def sampling_changes(steps: list[StepVerified]) -> list[StepVerified]:
    """The steps where the sampling settings changed mid-reply (F3)."""
    return [st for st in steps if st.sampling is not None]


def settings_at(started: ReplyStarted | None, steps: list[StepVerified], index: int) -> dict[str, Any]:
    """The sampling settings step ``steps[index]`` ran with: the last change at or
    before it, else what the reply started with ({} when nothing was recorded)."""
    for st in reversed(steps[: index + 1]):
        if st.sampling is not None:
            return st.sampling
    return dict(started.sampling) if started is not None else {}


def verify_text(verify: str) -> str:
    """A reply's recorded ``verify`` (:attr:`ReplyStarted.verify`) in a reader's words."""
    if verify == "not bit-exact":
        return "one batch: " + NOT_BIT_EXACT
    if verify == "not exact":
        return "one batch, not checked for exactness: replies match plain decoding only approximately"
    return f"{verify}: replies equal plain decoding token for token"


def sampling_summary(entry: Entry) -> str:
    """One line on how a reply was sampled (Markdown transcript): settings, seed,
    how to reproduce it, and where F3 changed the settings. "" when nothing was recorded."""
    started = entry.started
    if started is None or not started.sampling:
        return ""
    parts = [f"sampling: {sampling_label(started.sampling)}"]
    seed = reply_seed(started)
    if seed is not None:
        how = "fixed" if seed[1] else "drawn for this reply"
        note = reproduce_note(started, entry.steps)
        parts.append(f"seed {seed[0]} ({how}; `{reproduce_flags(started)}` reproduces it{f' {note}' if note else ''})")
    for st in sampling_changes(entry.steps):
        parts.append(f"from step {st.index}: {sampling_label(st.sampling or {})}")
    return " · ".join(parts)


def number(value: Any) -> str:
    """A setting's value as it is typed: ``0.8``, ``64``, ``1`` (not ``1.0``)."""
    if isinstance(value, float) and float(f"{value:g}") == value:
        return f"{value:g}"
    return str(value)


def reply_stats(events: list[Event]) -> AcceptanceStats:
    """Acceptance totals of one reply, from its events.

    Per-step time is sync + draft + verify while streaming; once the reply has
    finished, its exact token count and generation time replace the estimates.
    """
    stats = AcceptanceStats()
    for ev in events:
        if isinstance(ev, StepVerified):
            stats.add_step(
                len(ev.proposed),
                ev.n_accepted,
                ev.n_committed,
                step_ms=ev.sync_ms + ev.draft_ms + ev.verify_ms,
                sync_ms=ev.sync_ms,
                draft_ms=ev.draft_ms,
                verify_ms=ev.verify_ms,
            )
        elif isinstance(ev, ReplyFinished):
            stats.n_tokens = ev.n_tokens
            stats.generation_ms = ev.generation_ms
    return stats


def now_iso() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


def versions() -> dict[str, str]:
    """Versions worth recording with a transcript."""
    out = {"python": platform.python_version()}
    for dist in ("skippy-tui", "llama-cpp-python", "textual", "gguf"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def transcript_names(folder: Path) -> Iterator[Path]:
    """``chat-YYYYmmdd-HHMMSS.json`` in ``folder`` (now), then ``-2``, ``-3``, … after it, endlessly."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    yield Path(folder) / f"chat-{stamp}.json"
    for n in itertools.count(2):
        yield Path(folder) / f"chat-{stamp}-{n}.json"


def new_transcript_path(folder: Path) -> Path:
    """A ``chat-YYYYmmdd-HHMMSS.json`` name in ``folder`` that is free now (suffixed if taken).
    To write a new file, :meth:`Transcript.save_new` claims its name as it writes."""
    return next(p for p in transcript_names(folder) if not p.exists() and not p.with_suffix(".md").exists())
