import pytest


@pytest.fixture
def fake_runtime(db, settings):
    """The process runtime on instant scripted providers; definitions loaded; cache clean."""
    from django.core.cache import cache

    from agents_app.catalog import catalog, sync_files
    from voiceagent.connections import tracker
    from voiceagent.conversation.testing import EnergyVAD, InstantTTS, ScriptedChat, ScriptedSTT
    from voiceagent.runtime import runtime

    tracker.reset()
    cache.clear()
    sync_files()
    catalog.reload()
    saved = (runtime.stt, runtime.tts, runtime.chat, runtime.vad_factory)
    runtime.stt = ScriptedSTT(["i lost my card"] * 50)
    runtime.tts = InstantTTS(sample_rate=24000, ms_per_word=20, chunk_ms=20)
    runtime.chat = ScriptedChat(default="Sure, I can help with that.")
    runtime.vad_factory = EnergyVAD
    yield runtime
    runtime.stt, runtime.tts, runtime.chat, runtime.vad_factory = saved
    cache.clear()
