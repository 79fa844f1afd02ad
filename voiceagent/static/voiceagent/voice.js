/* Microphone capture (AudioWorklet -> 16 kHz PCM16, 20 ms frames) and gapless playback of streamed
   PCM16, shared by the pages. No build step; works in current Chromium and Firefox. */
"use strict";

// The capture worklet is a static file (the pages' CSP allows scripts from 'self' only); its URL
// comes from the page, which knows the static files' URLs.
const WORKLET_URL = (document.currentScript && document.currentScript.dataset.worklet)
  || "/static/voiceagent/capture-worklet.js";

class MicCapture {
  constructor(onFrame, targetRate = 16000, frameMs = 20, processing = true) {
    this.onFrame = onFrame; this.targetRate = targetRate; this.frameSamples = targetRate * frameMs / 1000;
    this.processing = processing;
  }
  async start() {
    // Echo cancellation keeps the agent's own voice from barging in on speakers; turn processing
    // off for a headset or a clean line (it also smears synthetic test audio).
    const p = this.processing;
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: p, noiseSuppression: p, autoGainControl: p } });
    this.ctx = new AudioContext();
    await this.ctx.audioWorklet.addModule(WORKLET_URL);
    this.source = this.ctx.createMediaStreamSource(this.stream);
    this.node = new AudioWorkletNode(this.ctx, "pcm-capture", {
      processorOptions: { targetRate: this.targetRate, frameSamples: this.frameSamples } });
    this.node.port.onmessage = (e) => this.onFrame(e.data);
    this.source.connect(this.node);
    // keep the graph pulled without making the microphone audible
    const mute = this.ctx.createGain(); mute.gain.value = 0;
    this.node.connect(mute).connect(this.ctx.destination);
  }
  async stop() {
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    if (this.ctx) await this.ctx.close();
    this.stream = this.ctx = null;
  }
}

class PcmPlayer {
  /* Schedules chunks back to back on one AudioContext clock; stop() drops everything queued;
     duck(db) lowers (0: restores) the gain of what plays, the server's `duck` event. */
  constructor() { this.ctx = null; this.out = null; this.next = 0; this.sources = new Set(); this.chunksPlayed = 0; }
  ensure() {
    if (!this.ctx) {
      this.ctx = new AudioContext();
      this.out = this.ctx.createGain();
      this.out.connect(this.ctx.destination);
    }
    if (this.ctx.state === "suspended") this.ctx.resume();
    return this.ctx;
  }
  duck(gainDb) {
    const ctx = this.ensure();
    const gain = gainDb < 0 ? Math.pow(10, gainDb / 20) : 1;
    this.out.gain.setTargetAtTime(gain, ctx.currentTime, 0.01);  // ~10 ms: no click
  }
  play(int16, sampleRate) {
    const ctx = this.ensure();
    const buffer = ctx.createBuffer(1, int16.length, sampleRate);
    const data = buffer.getChannelData(0);
    for (let i = 0; i < int16.length; i++) data[i] = int16[i] / 0x8000;
    const src = ctx.createBufferSource();
    src.buffer = buffer;
    src.connect(this.out);
    const start = Math.max(ctx.currentTime + 0.03, this.next);
    src.start(start);
    this.next = start + buffer.duration;
    this.sources.add(src);
    src.onended = () => { this.sources.delete(src); this.chunksPlayed++; };
  }
  stop() {
    for (const src of this.sources) { try { src.stop(); } catch (e) { /* already ended */ } }
    this.sources.clear();
    this.next = 0;
    if (this.out) this.out.gain.setValueAtTime(1, this.ctx.currentTime);  // a stop ends a duck
  }
  get playing() { return this.sources.size > 0; }
}

function b64ToInt16(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Int16Array(bytes.buffer, 0, bytes.length >> 1);
}
