/* The microphone's AudioWorklet: resample to the target rate (windowed-sinc low-pass) and post
   PCM16 frames. A file of its own (loaded by voice.js from this URL) so the pages' Content-Security-
   Policy can stay script-src 'self': a worklet built from a blob: URL needed blob: scripts. */
"use strict";

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
