/* Microphone capture (AudioWorklet -> 16 kHz PCM16, 20 ms frames) and gapless playback of streamed
   PCM16, shared by the pages. No build step; works in current Chromium and Firefox. */
"use strict";

const WORKLET_SOURCE = `
class PcmCapture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.step = sampleRate / options.processorOptions.targetRate;  // input samples per output sample
    this.frame = new Int16Array(options.processorOptions.frameSamples);
    this.filled = 0;
    // Windowed-sinc low-pass at 0.9 x the target Nyquist: no aliasing into the speech band.
    const taps = 63, cutoff = 0.45 / this.step;
    this.kernel = new Float32Array(taps);
    let sum = 0;
    for (let i = 0; i < taps; i++) {
      const m = i - (taps - 1) / 2;
      const sinc = m === 0 ? 2 * Math.PI * cutoff : Math.sin(2 * Math.PI * cutoff * m) / m;
      const w = 0.42 - 0.5 * Math.cos(2 * Math.PI * i / (taps - 1)) + 0.08 * Math.cos(4 * Math.PI * i / (taps - 1));
      this.kernel[i] = sinc * w; sum += this.kernel[i];
    }
    for (let i = 0; i < taps; i++) this.kernel[i] /= sum;
    this.history = new Float32Array(taps);  // ring buffer of the last inputs
    this.head = 0;
    this.next = 0;  // input index (relative) of the next output sample
  }
  process(inputs) {
    const input = inputs[0] && inputs[0][0];
    if (!input) return true;
    const k = this.kernel, h = this.history, n = k.length;
    for (let i = 0; i < input.length; i++) {
      h[this.head] = input[i];
      this.head = (this.head + 1) % n;
      this.next -= 1;
      if (this.next <= 0) {
        this.next += this.step;
        let acc = 0;
        for (let j = 0; j < n; j++) acc += k[j] * h[(this.head + j) % n];
        const v = Math.max(-1, Math.min(1, acc));
        this.frame[this.filled++] = v < 0 ? v * 0x8000 : v * 0x7fff;
        if (this.filled === this.frame.length) {
          this.port.postMessage(this.frame.buffer.slice(0));
          this.filled = 0;
        }
      }
    }
    return true;
  }
}
registerProcessor("pcm-capture", PcmCapture);
`;

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
    const url = URL.createObjectURL(new Blob([WORKLET_SOURCE], { type: "application/javascript" }));
    await this.ctx.audioWorklet.addModule(url);
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
