#!/usr/bin/env node
// Independent reference implementation (plain Node.js, no packages) of the
// forward pass of three Hugging Face transformers models:
//   GPT2LMHeadModel, LlamaForCausalLM (default RoPE and Llama 3.1 "llama3"
//   rope_scaling), Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM,
//   MistralForCausalLM (sliding-window attention)
// written from the semantics of transformers' modeling_gpt2.py /
// modeling_llama.py / modeling_qwen2.py / modeling_qwen3.py / modeling_mixtral.py /
// modeling_mistral.py / masking_utils.py / modeling_rope_utils.py
// (4.4x/4.5x, eager attention, fp32).
// It writes tiny random checkpoints in the hub layout (model.safetensors +
// config.json) and the logits the HF model computes for a fixed token sequence.
//
//   node make_hf_fixtures.js OUTDIR
//
// writes OUTDIR/{gpt2,llama,llama3,...,mistral}/{model.safetensors,config.json,
// reference.json,reference_logits.f32}. Output is byte-for-byte deterministic.
//
// Numerics: weights are drawn from a seeded PRNG, rounded to float32
// (Math.fround) and stored; the forward pass is computed in float64 from those
// exact float32 values; logits are rounded to float32 when stored.
'use strict';

const fs = require('fs');
const path = require('path');

// ---------------------------------------------------------------- PRNG ----
function mulberry32(seed) {
  let a = seed >>> 0;
  return function () {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
function makeNormal(seed) {
  const u = mulberry32(seed);
  let spare = null;
  return function () {
    if (spare !== null) { const s = spare; spare = null; return s; }
    let u1 = u();
    while (u1 <= 0) u1 = u();           // (0,1): log(0) impossible
    const u2 = u();
    const r = Math.sqrt(-2 * Math.log(u1));
    spare = r * Math.sin(2 * Math.PI * u2);
    return r * Math.cos(2 * Math.PI * u2);
  };
}

// -------------------------------------------------------- tensor store ----
// Each tensor: {shape, data: Float32Array}. Values read from a Float32Array
// are exact doubles of the stored float32 values, so computing with them in
// JS numbers is "float64 arithmetic on the fp32 weights".
class Store {
  constructor(seed) { this.normal = makeNormal(seed); this.t = new Map(); }
  add(name, shape, gen) {
    if (this.t.has(name)) throw new Error('dup ' + name);
    const n = shape.reduce((a, b) => a * b, 1);
    const d = new Float32Array(n);
    for (let i = 0; i < n; i++) d[i] = Math.fround(gen(i));
    this.t.set(name, { shape, data: d });
    return d;
  }
  randn(name, shape, std, mean = 0) { return this.add(name, shape, () => mean + std * this.normal()); }
  get(name) { const x = this.t.get(name); if (!x) throw new Error('missing ' + name); return x.data; }
  // A tensor of raw fp8 E4M3 codes (Uint8Array), written as dtype F8_E4M3.
  addCodes(name, shape, codes) {
    if (this.t.has(name)) throw new Error('dup ' + name);
    this.t.set(name, { shape, data: codes, dtype: 'F8_E4M3' });
  }
}
const elemBytes = (dtype) => (dtype === 'F8_E4M3' ? 1 : 4);

// ------------------------------------------------------ safetensors IO ----
function writeSafetensors(file, store) {
  const names = [...store.t.keys()].sort();   // ASCII names: JS order == byte order
  const header = { __metadata__: { format: 'pt' } };
  let off = 0;
  for (const n of names) {
    const { shape, data, dtype = 'F32' } = store.t.get(n);
    header[n] = { dtype, shape, data_offsets: [off, off + data.length * elemBytes(dtype)] };
    off += data.length * elemBytes(dtype);
  }
  let hjson = JSON.stringify(header);
  while ((8 + Buffer.byteLength(hjson)) % 8 !== 0) hjson += ' ';
  const hbuf = Buffer.from(hjson, 'utf8');
  const out = Buffer.alloc(8 + hbuf.length + off);
  out.writeBigUInt64LE(BigInt(hbuf.length), 0);
  hbuf.copy(out, 8);
  let p = 8 + hbuf.length;
  for (const n of names) {
    const { data, dtype = 'F32' } = store.t.get(n);
    if (dtype === 'F8_E4M3') for (let i = 0; i < data.length; i++, p += 1) out.writeUInt8(data[i], p);
    else for (let i = 0; i < data.length; i++, p += 4) out.writeFloatLE(data[i], p);
  }
  fs.writeFileSync(file, out);
  return out.length;
}

// Separate, minimal reader used only for the self-check.
function readSafetensors(file) {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const htxt = buf.subarray(8, 8 + n).toString('utf8');
  const header = JSON.parse(htxt);
  const base = 8 + n;
  const tensors = {};
  for (const [k, v] of Object.entries(header)) {
    if (k === '__metadata__') continue;
    const [b, e] = v.data_offsets;
    const fp8 = v.dtype === 'F8_E4M3';
    const vals = fp8 ? new Uint8Array(e - b) : new Float32Array((e - b) / 4);
    for (let i = 0; i < vals.length; i++) vals[i] = fp8 ? buf.readUInt8(base + b + i) : buf.readFloatLE(base + b + 4 * i);
    tensors[k] = { dtype: v.dtype, shape: v.shape, begin: b, end: e, data: vals };
  }
  return { headerLen: n, headerText: htxt, header, tensors, fileLen: buf.length, dataLen: buf.length - base };
}

function selfCheckSafetensors(file, store) {
  const r = readSafetensors(file);
  const fail = (m) => { throw new Error('self-check ' + file + ': ' + m); };
  if ((8 + r.headerLen) % 8 !== 0) fail('header not 8-aligned');
  if (JSON.stringify(r.header.__metadata__) !== '{"format":"pt"}') fail('metadata');
  const names = Object.keys(r.tensors);
  const sorted = [...names].sort();
  if (names.join('\n') !== sorted.join('\n')) fail('header not in sorted order');
  if (names.length !== store.t.size) fail('tensor count');
  let off = 0;
  for (const n of sorted) {
    const t = r.tensors[n], s = store.t.get(n);
    if (!s) fail('unexpected ' + n);
    if (t.dtype !== (s.dtype || 'F32')) fail('dtype ' + n);
    if (JSON.stringify(t.shape) !== JSON.stringify(s.shape)) fail('shape ' + n);
    if (t.begin !== off) fail('not contiguous at ' + n);
    off = t.end;
    const numel = s.shape.reduce((a, b) => a * b, 1);
    if (t.data.length !== numel) fail('numel ' + n);
    for (let i = 0; i < numel; i++) {
      if (!Object.is(t.data[i], s.data[i])) fail(`value ${n}[${i}] ${t.data[i]} != ${s.data[i]}`);
    }
  }
  if (off !== r.dataLen) fail('trailing bytes');
  return { tensors: names.length, bytes: r.fileLen, headerLen: r.headerLen };
}

// ----------------------------------------- Python-style config.json -------
// transformers writes config.json with json.dumps(d, indent=2, sort_keys=True)
// + "\n". Floats are written with Python repr (500000.0, 1e-05, 0.0).
class PyFloat { constructor(v) { this.v = v; } }
const F = (v) => new PyFloat(v);
function pyFloatRepr(v) {
  if (v === 0) return Object.is(v, -0) ? '-0.0' : '0.0';
  const [mant, expS] = v.toExponential().split('e');
  const ex = parseInt(expS, 10);
  if (ex < -4 || ex >= 16) {
    const sign = ex < 0 ? '-' : '+';
    const a = Math.abs(ex);
    return mant + 'e' + sign + (a < 10 ? '0' + a : String(a));
  }
  const s = String(v);
  return /[.e]/.test(s) ? s : s + '.0';
}
function pyJson(x, ind = 0) {
  const pad = (n) => ' '.repeat(n);
  if (x === null) return 'null';
  if (x instanceof PyFloat) return pyFloatRepr(x.v);
  if (typeof x === 'boolean') return x ? 'true' : 'false';
  if (typeof x === 'number') { if (!Number.isInteger(x)) throw new Error('use F() for floats'); return String(x); }
  if (typeof x === 'string') return JSON.stringify(x);
  if (Array.isArray(x)) {
    if (x.length === 0) return '[]';
    return '[\n' + x.map((e) => pad(ind + 2) + pyJson(e, ind + 2)).join(',\n') + '\n' + pad(ind) + ']';
  }
  const keys = Object.keys(x).sort();
  if (keys.length === 0) return '{}';
  return '{\n' + keys.map((k) => pad(ind + 2) + JSON.stringify(k) + ': ' + pyJson(x[k], ind + 2)).join(',\n') + '\n' + pad(ind) + '}';
}
function configValue(cfg, k) { const v = cfg[k]; return v instanceof PyFloat ? v.v : v; }

// ------------------------------------------------------------ math ops ----
const zeros = (r, c) => Array.from({ length: r }, () => new Float64Array(c));
// Conv1D (GPT-2): weight stored (in, out); y = x @ W + b
function conv1d(x, W, b, nin, nout) {
  const y = zeros(x.length, nout);
  for (let t = 0; t < x.length; t++) {
    const xt = x[t], yt = y[t];
    for (let o = 0; o < nout; o++) yt[o] = b ? b[o] : 0;
    for (let i = 0; i < nin; i++) { const xi = xt[i]; const r = i * nout; for (let o = 0; o < nout; o++) yt[o] += xi * W[r + o]; }
  }
  return y;
}
// nn.Linear: weight stored (out, in); y = x @ W^T (+ b)
function linear(x, W, b, nin, nout) {
  const y = zeros(x.length, nout);
  for (let t = 0; t < x.length; t++) {
    const xt = x[t], yt = y[t];
    for (let o = 0; o < nout; o++) {
      let s = b ? b[o] : 0; const r = o * nin;
      for (let i = 0; i < nin; i++) s += xt[i] * W[r + i];
      yt[o] = s;
    }
  }
  return y;
}
function layerNorm(x, w, b, eps) {
  return x.map((r) => {
    const n = r.length; let m = 0; for (const v of r) m += v; m /= n;
    let va = 0; for (const v of r) va += (v - m) * (v - m); va /= n;   // biased variance
    const inv = 1 / Math.sqrt(va + eps);
    return Float64Array.from(r, (v, i) => (v - m) * inv * w[i] + b[i]);
  });
}
function rmsNorm(x, w, eps) {
  return x.map((r) => {
    let ms = 0; for (const v of r) ms += v * v; ms /= r.length;
    const inv = 1 / Math.sqrt(ms + eps);
    return Float64Array.from(r, (v, i) => w[i] * (v * inv));
  });
}
const add = (a, b) => a.map((r, t) => Float64Array.from(r, (v, i) => v + b[t][i]));
const geluNew = (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
function erf(x) { // Abramowitz-Stegun 7.1.26 is too coarse; use series/continued fraction
  const ax = Math.abs(x);
  if (ax < 2.5) { let s = 0, term = x, n = 0; while (Math.abs(term) > 1e-17 * Math.abs(s) || n < 3) { s += term / (2 * n + 1); n++; term *= -x * x / n; if (n > 200) break; } return 2 / Math.sqrt(Math.PI) * s; }
  // erfc continued fraction
  let f = 0; for (let k = 60; k >= 1; k--) f = (k / 2) / (ax + f);
  const erfc = Math.exp(-ax * ax) / Math.sqrt(Math.PI) / (ax + f);
  return Math.sign(x) * (1 - erfc);
}
const geluExact = (x) => 0.5 * x * (1 + erf(x / Math.SQRT2));
const silu = (x) => x / (1 + Math.exp(-x));
function softmax(v) {
  let m = -Infinity; for (const x of v) if (x > m) m = x;
  const e = v.map((x) => Math.exp(x - m)); let s = 0; for (const x of e) s += x;
  return e.map((x) => x / s);
}

// Causal multi-head attention. q: T x (nh*hd), k,v: T x (nkv*hd).
// kvOf(h) gives the kv head used by query head h. window > 0: query t sees
// only keys s with t - window < s <= t (transformers' sliding_window_overlay
// and'ed with the causal mask: itself and the window - 1 keys before it).
function causalAttention(q, k, v, nh, hd, kvOf, scale, window = 0) {
  const T = q.length; const out = zeros(T, nh * hd);
  for (let h = 0; h < nh; h++) {
    const g = kvOf(h);
    for (let t = 0; t < T; t++) {
      const s0 = window > 0 ? Math.max(0, t - window + 1) : 0;
      const sc = [];
      for (let s = s0; s <= t; s++) {
        let d = 0; for (let i = 0; i < hd; i++) d += q[t][h * hd + i] * k[s][g * hd + i];
        sc.push(d * scale);
      }
      const p = softmax(sc);
      for (let s = s0; s <= t; s++) for (let i = 0; i < hd; i++) out[t][h * hd + i] += p[s - s0] * v[s][g * hd + i];
    }
  }
  return out;
}

// Default RoPE inverse frequencies (transformers _compute_default_rope_parameters):
// inv_freq[j] = 1 / theta^(2j/hd), j = 0..hd/2-1; attention_factor 1.0.
const defaultInvFreq = (theta, hd) => Array.from({ length: hd / 2 }, (_, j) => 1 / Math.pow(theta, (2 * j) / hd));

// Llama 3.1 RoPE (transformers _compute_llama3_parameters, rope_type "llama3"):
//   wavelen = 2*pi/inv_freq
//   low_freq_wavelen = original_max_position_embeddings / low_freq_factor
//   high_freq_wavelen = original_max_position_embeddings / high_freq_factor
//   inv_freq_llama = where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
//   smooth = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
//   smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
//   is_medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen)
//   inv_freq = where(is_medium, smoothed, inv_freq_llama)
// attention_factor stays 1.0 (cos/sin are not scaled).
// variant (mutations only): 'llama3' (correct) | 'linear' (every inv_freq / factor)
//   | 'no_smooth_keep' (medium band left unchanged) | 'no_smooth_div' (medium band / factor)
//   | 'low_keep' (low band not divided; medium band still smoothed)
function llama3InvFreq(inv0, rs, variant = 'llama3') {
  const factor = configValue(rs, 'factor'), lff = configValue(rs, 'low_freq_factor'), hff = configValue(rs, 'high_freq_factor');
  const old = configValue(rs, 'original_max_position_embeddings');
  const lowW = old / lff, highW = old / hff;
  const rows = inv0.map((f) => {
    const wavelen = 2 * Math.PI / f;
    const low = wavelen > lowW;
    const llama = low ? f / factor : f;
    const smooth = (old / wavelen - lff) / (hff - lff);
    const smoothed = (1 - smooth) * llama / factor + smooth * llama;
    const medium = !(wavelen < highW) && !(wavelen > lowW);
    const branch = medium ? 'medium' : (low ? 'low' : 'high');
    let out = medium ? smoothed : llama;
    if (variant === 'linear') out = f / factor;
    else if (variant === 'no_smooth_keep') out = low ? f / factor : f;
    else if (variant === 'no_smooth_div') out = (low || medium) ? f / factor : f;
    else if (variant === 'low_keep') out = medium ? smoothed : f;
    else if (variant !== 'llama3') throw new Error('llama3 variant ' + variant);
    return { inv0: f, wavelen, branch, smooth, inv: out };
  });
  return { inv: rows.map((r) => r.inv), rows, lowW, highW };
}
// YaRN (transformers' _compute_yarn_parameters, 4.5x/5: truncate true, no
// mscale): pair j's frequency is divided by factor as a ramp over j goes from
// 0 at floor(d(beta_fast)) to 1 at ceil(d(beta_slow)) (clamped to [0, hd-1]),
// d(r) = hd ln(original / (2 pi r)) / (2 ln theta), the pair turning r times
// over the original context; cos and sin are multiplied by attention_factor
// (default 0.1 ln(factor) + 1).
// variant (mutations only): 'yarn' (correct) | 'linear' (no ramp: every
//   frequency / factor) | 'max_positions' (the ramp from max_position_embeddings,
//   transformers 4.4x's reading) | 'no_truncate' (ramp ends not rounded)
function yarnInvFreq(inv0, cfg, variant = 'yarn') {
  const rs = cfg.rope_scaling, hd = 2 * inv0.length, theta = configValue(cfg, 'rope_theta');
  const factor = configValue(rs, 'factor');
  const original = variant === 'max_positions' ? cfg.max_position_embeddings : rs.original_max_position_embeddings;
  const bf = rs.beta_fast === undefined ? 32 : configValue(rs, 'beta_fast');
  const bs = rs.beta_slow === undefined ? 1 : configValue(rs, 'beta_slow');
  const d = (r) => hd * Math.log(original / (r * 2 * Math.PI)) / (2 * Math.log(theta));
  const trunc = variant !== 'no_truncate';
  let low = Math.max(trunc ? Math.floor(d(bf)) : d(bf), 0), high = Math.min(trunc ? Math.ceil(d(bs)) : d(bs), hd - 1);
  if (low === high) high += 0.001;
  const inv = inv0.map((f, j) => {
    if (variant === 'linear') return f / factor;
    const ramp = Math.min(Math.max((j - low) / (high - low), 0), 1);
    return (f / factor) * ramp + f * (1 - ramp);
  });
  return { inv, low, high };
}
function yarnAttentionFactor(rs) {
  if (rs.attention_factor !== undefined) return configValue(rs, 'attention_factor');
  const factor = configValue(rs, 'factor');
  return factor <= 1 ? 1 : 0.1 * Math.log(factor) + 1;
}
// Inverse frequencies for a Llama-family config. ropeScaling: 'config' (what
// the config says) | 'none' (ignore rope_scaling) | a llama3InvFreq or yarnInvFreq variant.
function ropeInvFreq(cfg, ropeScaling = 'config') {
  const inv0 = defaultInvFreq(configValue(cfg, 'rope_theta'), headDim(cfg));
  const rs = cfg.rope_scaling;
  if (ropeScaling === 'none' || rs === null || rs === undefined) return inv0;
  if (rs.rope_type === 'yarn') return yarnInvFreq(inv0, cfg, ropeScaling === 'config' ? 'yarn' : ropeScaling).inv;
  if (rs.rope_type !== 'llama3') throw new Error('unsupported rope_type ' + rs.rope_type);
  return llama3InvFreq(inv0, rs, ropeScaling === 'config' ? 'llama3' : ropeScaling).inv;
}
// What multiplies cos and sin (YaRN's attention factor; 1 otherwise).
function ropeMagnitude(cfg, opts) {
  const rs = cfg.rope_scaling;
  if (opts.ropeScaling === 'none' || opts.noAttentionFactor || !rs || rs.rope_type !== 'yarn') return 1;
  return yarnAttentionFactor(rs);
}

// Rotary embedding on T x (nheads*hd), in place copy; inv = hd/2 inverse frequencies.
// mode 'half'      : HF rotate_half: x*cos + cat(-x2, x1)*sin, cos = cat(c, c)
// mode 'half_neg'  : wrong sign (rotate_half = cat(x2, -x1)), i.e. rotation by -angle
// mode 'interleave': GPT-J / Meta-original pairing (2j, 2j+1) with angle j
function applyRope(x, nheads, hd, inv, mode, mag = 1) {
  const half = hd / 2;
  if (inv.length !== half) throw new Error('inv_freq length');
  return x.map((row, pos) => {
    const o = new Float64Array(row.length);
    for (let h = 0; h < nheads; h++) {
      const b = h * hd;
      for (let j = 0; j < half; j++) {
        const a = pos * inv[j], c = mag * Math.cos(a), s = mag * Math.sin(a);
        if (mode === 'interleave') {
          const x1 = row[b + 2 * j], x2 = row[b + 2 * j + 1];
          o[b + 2 * j] = x1 * c - x2 * s; o[b + 2 * j + 1] = x2 * c + x1 * s;
        } else {
          const x1 = row[b + j], x2 = row[b + j + half];
          const sg = mode === 'half_neg' ? -1 : 1;
          o[b + j] = x1 * c - sg * x2 * s; o[b + j + half] = x2 * c + sg * x1 * s;
        }
      }
    }
    return o;
  });
}

// -------------------------------------------------------------- models ----
const V = 200, T = 16;
const IDS = Array.from({ length: T }, (_, t) => (t * 37 + 11) % V);

const SCALE = { lin: 0.15, bias: 0.05, normW: 0.1, lnB: 0.05, emb: 0.3, head: 0.3, gate: 0.5 };

// ---- GPT-2
const GPT2_CFG = {
  activation_function: 'gelu_new', architectures: ['GPT2LMHeadModel'], attn_pdrop: F(0.0),
  bos_token_id: 199, embd_pdrop: F(0.0), eos_token_id: 199, initializer_range: F(0.02),
  layer_norm_epsilon: F(1e-5), model_type: 'gpt2', n_ctx: 32, n_embd: 32, n_head: 4, n_inner: 64,
  n_layer: 2, n_positions: 32, reorder_and_upcast_attn: false, resid_pdrop: F(0.0),
  scale_attn_by_inverse_layer_idx: false, scale_attn_weights: true, summary_activation: null,
  summary_first_dropout: F(0.1), summary_proj_to_labels: true, summary_type: 'cls_index',
  summary_use_proj: true, tie_word_embeddings: true, torch_dtype: 'float32', use_cache: true, vocab_size: V,
};
function gpt2Weights(seed) {
  const c = GPT2_CFG, D = c.n_embd, I = c.n_inner, P = c.n_positions, S = new Store(seed);
  S.randn('wte.weight', [V, D], SCALE.emb);
  S.randn('wpe.weight', [P, D], SCALE.emb);
  for (let l = 0; l < c.n_layer; l++) {
    const p = `h.${l}.`;
    S.randn(p + 'ln_1.weight', [D], SCALE.normW, 1); S.randn(p + 'ln_1.bias', [D], SCALE.lnB);
    S.randn(p + 'attn.c_attn.weight', [D, 3 * D], SCALE.lin); S.randn(p + 'attn.c_attn.bias', [3 * D], SCALE.bias);
    S.randn(p + 'attn.c_proj.weight', [D, D], SCALE.lin); S.randn(p + 'attn.c_proj.bias', [D], SCALE.bias);
    S.randn(p + 'ln_2.weight', [D], SCALE.normW, 1); S.randn(p + 'ln_2.bias', [D], SCALE.lnB);
    S.randn(p + 'mlp.c_fc.weight', [D, I], SCALE.lin); S.randn(p + 'mlp.c_fc.bias', [I], SCALE.bias);
    S.randn(p + 'mlp.c_proj.weight', [I, D], SCALE.lin); S.randn(p + 'mlp.c_proj.bias', [D], SCALE.bias);
    // causal-mask buffer as in the hub file (torch.tril(ones)) viewed [1,1,P,P]
    S.add(p + 'attn.bias', [1, 1, P, P], (i) => ((i % P) <= Math.floor(i / P) ? 1 : 0));
  }
  S.randn('ln_f.weight', [D], SCALE.normW, 1); S.randn('ln_f.bias', [D], SCALE.lnB);
  return S;
}
// opts.conv1dAsLinear : read every Conv1D buffer as if it were nn.Linear (out,in)
// opts.transposeSquare: transpose the square attn.c_proj weights (shape-preserving)
// opts.qkvOrder       : column block order of c_attn, e.g. 'kqv' (wrong) vs 'qkv'
// opts.gelu           : 'new' (correct) or 'exact'
function gpt2Forward(S, opts = {}) {
  const c = GPT2_CFG, D = c.n_embd, H = c.n_head, hd = D / H, I = c.n_inner, eps = configValue(c, 'layer_norm_epsilon');
  const wte = S.get('wte.weight'), wpe = S.get('wpe.weight');
  const conv = (x, W, b, nin, nout) => (opts.conv1dAsLinear ? linear(x, W, b, nin, nout) : conv1d(x, W, b, nin, nout));
  const transp = (W, n) => { const o = new Float32Array(n * n); for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) o[j * n + i] = W[i * n + j]; return o; };
  let h = IDS.map((id, t) => Float64Array.from({ length: D }, (_, i) => wte[id * D + i] + wpe[t * D + i]));
  for (let l = 0; l < c.n_layer; l++) {
    const p = `h.${l}.`, g = (n) => S.get(p + n);
    const a = layerNorm(h, g('ln_1.weight'), g('ln_1.bias'), eps);
    const qkv = conv(a, g('attn.c_attn.weight'), g('attn.c_attn.bias'), D, 3 * D);
    const order = opts.qkvOrder || 'qkv';
    const blk = (which) => qkv.map((r) => r.slice(order.indexOf(which) * D, (order.indexOf(which) + 1) * D));
    const att = causalAttention(blk('q'), blk('k'), blk('v'), H, hd, (hh) => hh, 1 / Math.sqrt(hd));
    let cp = g('attn.c_proj.weight'); if (opts.transposeSquare) cp = transp(cp, D);
    h = add(h, conv(att, cp, g('attn.c_proj.bias'), D, D));
    const m = layerNorm(h, g('ln_2.weight'), g('ln_2.bias'), eps);
    const act = opts.gelu === 'exact' ? geluExact : geluNew;
    const f = conv(m, g('mlp.c_fc.weight'), g('mlp.c_fc.bias'), D, I).map((r) => r.map(act));
    h = add(h, conv(f, g('mlp.c_proj.weight'), g('mlp.c_proj.bias'), I, D));
  }
  h = layerNorm(h, S.get('ln_f.weight'), S.get('ln_f.bias'), eps);
  return { logits: linear(h, wte, null, D, V) };  // tied lm_head = wte
}

// ---- Llama / Mixtral (shared decoder; MLP differs)
const LLAMA_CFG = {
  architectures: ['LlamaForCausalLM'], attention_bias: false, attention_dropout: F(0.0), bos_token_id: 1,
  eos_token_id: 2, head_dim: 8, hidden_act: 'silu', hidden_size: 32, initializer_range: F(0.02),
  intermediate_size: 48, max_position_embeddings: 64, mlp_bias: false, model_type: 'llama',
  num_attention_heads: 4, num_hidden_layers: 2, num_key_value_heads: 2, pretraining_tp: 1,
  rms_norm_eps: F(1e-6), rope_scaling: null, rope_theta: F(500000.0), tie_word_embeddings: false,
  torch_dtype: 'float32', use_cache: true, vocab_size: V,
};
// Llama 3.1-style rope_scaling, as transformers 4.4x saves it ("rope_type" key;
// rope_theta stays at top level). Otherwise identical to LLAMA_CFG.
const LLAMA3_CFG = {
  ...LLAMA_CFG,
  rope_scaling: { factor: F(8.0), high_freq_factor: F(4.0), low_freq_factor: F(1.0), original_max_position_embeddings: 256, rope_type: 'llama3' },
};
// YaRN (rope_type "yarn"): factor 4 over an original context of 256, as
// Qwen3's long-context setting writes it (max_position_embeddings = factor x
// original, so transformers 4 and 5 read the same factor), rope_theta 1e4
// (with 5e5 the ramp over 4 pairs would not tell 256 from 1024). Otherwise LLAMA_CFG.
const LLAMA_YARN_CFG = {
  ...LLAMA_CFG,
  max_position_embeddings: 1024,
  rope_theta: F(10000.0),
  rope_scaling: { factor: F(4.0), original_max_position_embeddings: 256, rope_type: 'yarn' },
};
// Qwen2 (transformers' modeling_qwen2.py): Llama's decoder with biases on
// q_proj, k_proj and v_proj (added before RoPE), none on o_proj; keys as
// Qwen2.5-0.5B's config.json has them (no head_dim, sliding window off,
// tied embeddings).
const QWEN2_CFG = {
  architectures: ['Qwen2ForCausalLM'], attention_dropout: F(0.0), bos_token_id: 151643, eos_token_id: 151643,
  hidden_act: 'silu', hidden_size: 32, initializer_range: F(0.02), intermediate_size: 48,
  max_position_embeddings: 64, max_window_layers: 2, model_type: 'qwen2', num_attention_heads: 4,
  num_hidden_layers: 2, num_key_value_heads: 2, rms_norm_eps: F(1e-6), rope_theta: F(1000000.0),
  sliding_window: 64, tie_word_embeddings: true, torch_dtype: 'float32', use_cache: true,
  use_sliding_window: false, vocab_size: V,
};
// Qwen3 (modeling_qwen3.py): Llama's decoder with an RMSNorm over each q and
// k head (q_norm/k_norm weights [head_dim], eps rms_norm_eps) between the
// projection and RoPE; no biases; heads wider than hidden_size / heads (as
// Qwen3-0.6B's 16 x 128 over 1024); keys as Qwen3-0.6B's config.json has them.
const QWEN3_CFG = {
  architectures: ['Qwen3ForCausalLM'], attention_bias: false, attention_dropout: F(0.0), bos_token_id: 151643,
  eos_token_id: 151645, head_dim: 16, hidden_act: 'silu', hidden_size: 32, initializer_range: F(0.02),
  intermediate_size: 48, max_position_embeddings: 64, max_window_layers: 2, model_type: 'qwen3',
  num_attention_heads: 4, num_hidden_layers: 2, num_key_value_heads: 2, rms_norm_eps: F(1e-6),
  rope_scaling: null, rope_theta: F(1000000.0), sliding_window: null, tie_word_embeddings: true,
  torch_dtype: 'float32', use_cache: true, use_sliding_window: false, vocab_size: V,
};
const MIXTRAL_CFG = {
  architectures: ['MixtralForCausalLM'], attention_dropout: F(0.0), bos_token_id: 1, eos_token_id: 2,
  head_dim: 8, hidden_act: 'silu', hidden_size: 32, initializer_range: F(0.02), intermediate_size: 24,
  max_position_embeddings: 64, model_type: 'mixtral', num_attention_heads: 4, num_experts_per_tok: 2,
  num_hidden_layers: 2, num_key_value_heads: 2, num_local_experts: 4, output_router_logits: false,
  rms_norm_eps: F(1e-5), rope_theta: F(1000000.0), router_aux_loss_coef: F(0.01), router_jitter_noise: F(0.0),
  sliding_window: null, tie_word_embeddings: false, torch_dtype: 'float32', use_cache: true, vocab_size: V,
};
// Mistral (modeling_mistral.py): Llama's decoder (no biases, RMSNorm, SwiGLU,
// GQA, rotate-half RoPE) whose every layer attends through a sliding window
// (create_sliding_window_causal_mask whenever config.sliding_window is set):
// query q sees keys kv with q - sliding_window < kv <= q. Window 4 of 16
// tokens: rows 4..15 (12 of 16) see fewer keys than full causal attention.
// Keys as MistralConfig saves them (no attention_bias/mlp_bias; head_dim given).
const MISTRAL_CFG = {
  architectures: ['MistralForCausalLM'], attention_dropout: F(0.0), bos_token_id: 1, eos_token_id: 2,
  head_dim: 8, hidden_act: 'silu', hidden_size: 32, initializer_range: F(0.02), intermediate_size: 48,
  max_position_embeddings: 64, model_type: 'mistral', num_attention_heads: 4, num_hidden_layers: 2,
  num_key_value_heads: 2, rms_norm_eps: F(1e-5), rope_theta: F(1000000.0), sliding_window: 4,
  tie_word_embeddings: false, torch_dtype: 'float32', use_cache: true, vocab_size: V,
};
// transformers 5's attention window of layer l of a config (0: full causal):
// Mistral's and Mixtral's sliding_window in every layer (MistralConfig's
// default 4096 when left out); the Qwen classes' only with
// use_sliding_window, in the layers layer_types says (Qwen3-MoE: every
// layer) or, without layer_types, Qwen2/Qwen3's from max_window_layers on
// and Qwen2-MoE's even layers below it. (Every fixture but mistral has none.)
function layerWindow(cfg, l) {
  const t = cfg.model_type;
  if (t === 'mistral') return cfg.sliding_window === undefined ? 4096 : (cfg.sliding_window || 0);
  if (t === 'mixtral') return cfg.sliding_window || 0;
  if (!cfg.use_sliding_window || !cfg.sliding_window) return 0;
  const mwl = cfg.max_window_layers === undefined ? 28 : cfg.max_window_layers;
  if (t === 'qwen3_moe') return cfg.sliding_window;
  if (cfg.layer_types) return cfg.layer_types[l] === 'sliding_attention' ? cfg.sliding_window : 0;
  if (t === 'qwen2_moe') return l % 2 === 0 && l < mwl ? cfg.sliding_window : 0;
  return l >= mwl ? cfg.sliding_window : 0;
}
// Qwen3-MoE (modeling_qwen3_moe.py): Qwen3's attention; the MLP of layer l is
// a sparse MoE block when (l + 1) % decoder_sparse_step == 0 and l is not in
// mlp_only_layers, else a dense MLP of intermediate_size. The block routes by
// softmax over all experts, top-k, renormalised only with norm_topk_prob
// (the class default false is kept here, so the un-renormalised weights are
// what the fixture shows; Mixtral's shows the renormalised ones). Tensors
// mlp.gate and mlp.experts.{e}.gate_proj/up_proj/down_proj.
const QWEN3_MOE_CFG = {
  architectures: ['Qwen3MoeForCausalLM'], attention_bias: false, attention_dropout: F(0.0), bos_token_id: 151643,
  decoder_sparse_step: 2, eos_token_id: 151645, head_dim: 16, hidden_act: 'silu', hidden_size: 32,
  initializer_range: F(0.02), intermediate_size: 48, max_position_embeddings: 64, max_window_layers: 2,
  mlp_only_layers: [], model_type: 'qwen3_moe', moe_intermediate_size: 24, norm_topk_prob: false,
  num_attention_heads: 4, num_experts: 4, num_experts_per_tok: 2, num_hidden_layers: 2,
  num_key_value_heads: 2, output_router_logits: false, rms_norm_eps: F(1e-6), rope_scaling: null,
  rope_theta: F(1000000.0), router_aux_loss_coef: F(0.001), sliding_window: null,
  tie_word_embeddings: false, torch_dtype: 'float32', use_cache: true, use_sliding_window: false,
  vocab_size: V,
};
// Qwen2-MoE (modeling_qwen2_moe.py): Qwen2's attention (q/k/v biases, no
// head_dim key: hidden_size / heads); the MLP of layer l is
// Qwen2MoeSparseMoeBlock unless l is in mlp_only_layers or (l + 1) %
// decoder_sparse_step != 0. The block: softmax over all experts, top-k,
// renormalised only with norm_topk_prob (default false), plus
// sigmoid(shared_expert_gate(x)) * shared_expert(x), one SwiGLU MLP of
// shared_expert_intermediate_size; names mlp.gate, mlp.experts.{e}.*,
// mlp.shared_expert.gate_proj/up_proj/down_proj, mlp.shared_expert_gate.
const QWEN2_MOE_CFG = {
  architectures: ['Qwen2MoeForCausalLM'], attention_dropout: F(0.0), bos_token_id: 151643,
  decoder_sparse_step: 1, eos_token_id: 151643, hidden_act: 'silu', hidden_size: 32,
  initializer_range: F(0.02), intermediate_size: 48, max_position_embeddings: 64, max_window_layers: 2,
  mlp_only_layers: [0], model_type: 'qwen2_moe', moe_intermediate_size: 24, norm_topk_prob: false,
  num_attention_heads: 4, num_experts: 4, num_experts_per_tok: 2, num_hidden_layers: 2,
  num_key_value_heads: 2, output_router_logits: false, rms_norm_eps: F(1e-6), rope_scaling: null,
  rope_theta: F(1000000.0), router_aux_loss_coef: F(0.001), shared_expert_intermediate_size: 48,
  sliding_window: null, tie_word_embeddings: false, torch_dtype: 'float32', use_cache: true,
  use_sliding_window: false, vocab_size: V,
};
// The MoE block's shape and tensor names in Mixtral, Qwen3-MoE and Qwen2-MoE,
// and whether layer l has one.
function moeSpec(cfg) {
  if (cfg.model_type === 'qwen3_moe' || cfg.model_type === 'qwen2_moe') {
    return {
      E: cfg.num_experts, I: cfg.moe_intermediate_size, renorm: cfg.norm_topk_prob, gate: 'mlp.gate.weight',
      expert: (e) => `mlp.experts.${e}.`, w1: 'gate_proj.weight', w3: 'up_proj.weight', w2: 'down_proj.weight',
      has: (l) => !cfg.mlp_only_layers.includes(l) && (l + 1) % cfg.decoder_sparse_step === 0,
      shared: cfg.model_type === 'qwen2_moe'
        ? { I: cfg.shared_expert_intermediate_size, prefix: 'mlp.shared_expert.', gate: 'mlp.shared_expert_gate.weight' }
        : null,
    };
  }
  return {
    E: cfg.num_local_experts, I: cfg.intermediate_size, renorm: true, gate: 'block_sparse_moe.gate.weight',
    expert: (e) => `block_sparse_moe.experts.${e}.`, w1: 'w1.weight', w3: 'w3.weight', w2: 'w2.weight',
    has: () => true,
  };
}
// qkStd: std of q_proj/k_proj weights (default SCALE.lin); larger values make
// attention scores, and hence RoPE angle differences, more visible in the logits.
// Qwen2 (model_type qwen2) also draws q/k/v biases with std qkvBiasStd,
// Qwen3 q/k norm weights (mean 1, std qkNormStd) and, with
// tie_word_embeddings, stores no lm_head.weight.
function decoderWeights(cfg, seed, moe, qkStd = SCALE.lin, qkvBiasStd = SCALE.bias, qkNormStd = SCALE.normW) {
  const D = cfg.hidden_size, I = cfg.intermediate_size, H = cfg.num_attention_heads, KV = cfg.num_key_value_heads, hd = headDim(cfg);
  const qwen2 = cfg.model_type === 'qwen2' || cfg.model_type === 'qwen2_moe';
  const S = new Store(seed);
  S.randn('model.embed_tokens.weight', [V, D], SCALE.emb);
  for (let l = 0; l < cfg.num_hidden_layers; l++) {
    const p = `model.layers.${l}.`;
    S.randn(p + 'input_layernorm.weight', [D], SCALE.normW, 1);
    S.randn(p + 'self_attn.q_proj.weight', [H * hd, D], qkStd);
    S.randn(p + 'self_attn.k_proj.weight', [KV * hd, D], qkStd);
    S.randn(p + 'self_attn.v_proj.weight', [KV * hd, D], SCALE.lin);
    if (qwen2) {
      S.randn(p + 'self_attn.q_proj.bias', [H * hd], qkvBiasStd);
      S.randn(p + 'self_attn.k_proj.bias', [KV * hd], qkvBiasStd);
      S.randn(p + 'self_attn.v_proj.bias', [KV * hd], qkvBiasStd);
    }
    if (cfg.model_type === 'qwen3' || cfg.model_type === 'qwen3_moe') {
      S.randn(p + 'self_attn.q_norm.weight', [hd], qkNormStd, 1);
      S.randn(p + 'self_attn.k_norm.weight', [hd], qkNormStd, 1);
    }
    S.randn(p + 'self_attn.o_proj.weight', [D, H * hd], SCALE.lin);
    S.randn(p + 'post_attention_layernorm.weight', [D], SCALE.normW, 1);
    const ms = moe ? moeSpec(cfg) : null;
    if (!ms || !ms.has(l)) {
      S.randn(p + 'mlp.gate_proj.weight', [I, D], SCALE.lin);
      S.randn(p + 'mlp.up_proj.weight', [I, D], SCALE.lin);
      S.randn(p + 'mlp.down_proj.weight', [D, I], SCALE.lin);
    } else {
      S.randn(p + ms.gate, [ms.E, D], SCALE.gate);
      for (let e = 0; e < ms.E; e++) {
        const q = p + ms.expert(e);
        S.randn(q + ms.w1, [ms.I, D], SCALE.lin);
        S.randn(q + ms.w2, [D, ms.I], SCALE.lin);
        S.randn(q + ms.w3, [ms.I, D], SCALE.lin);
      }
      if (ms.shared) {
        const q = p + ms.shared.prefix, Is = ms.shared.I;
        S.randn(q + 'gate_proj.weight', [Is, D], SCALE.lin);
        S.randn(q + 'up_proj.weight', [Is, D], SCALE.lin);
        S.randn(q + 'down_proj.weight', [D, Is], SCALE.lin);
        S.randn(p + ms.shared.gate, [1, D], SCALE.gate);
      }
    }
  }
  S.randn('model.norm.weight', [D], SCALE.normW, 1);
  if (!cfg.tie_word_embeddings) S.randn('lm_head.weight', [V, D], SCALE.head);
  return S;
}
// transformers' head_dim: the config's, else hidden_size / num_attention_heads.
function headDim(cfg) { return cfg.head_dim || cfg.hidden_size / cfg.num_attention_heads; }
// opts.rope: 'half' (correct) | 'half_neg' | 'interleave'
// opts.ropeScaling: 'config' (correct) | 'none' | llama3InvFreq variant (see ropeInvFreq)
// opts.gqa : 'floor' (correct: kv = floor(h / (H/KV))) | 'mod' (kv = h % KV)
// opts.moeRenorm: renormalise the top-k weights or not, whatever the model does
// opts.swapW13: swap w1 and w3 (Mixtral) / gate and up (Llama)
// opts.sharedGate (Qwen2-MoE): 'sigmoid' (correct) | 'none' (the shared expert
//   ungated) | 'softmax_joint' (its logit joins the router's softmax)
// opts.qkvBias (Qwen2): 'before_rope' (correct) | 'none' (biases ignored) |
//   'after_rope' (added to q and k after the rotation)
// opts.qkNorm (Qwen3): 'head' (correct: each head over head_dim, before RoPE) |
//   'none' | 'after_rope' | 'whole' (over all heads at once, OLMo2's way, the
//   head_dim weight tiled)
// opts.window (mutations): every layer's attention window in place of the
//   config's (0: full causal attention)
function decoderForward(cfg, S, moe, opts = {}) {
  const D = cfg.hidden_size, I = cfg.intermediate_size, H = cfg.num_attention_heads, KV = cfg.num_key_value_heads, hd = headDim(cfg);
  const eps = configValue(cfg, 'rms_norm_eps'), inv = ropeInvFreq(cfg, opts.ropeScaling || 'config');
  const mag = ropeMagnitude(cfg, opts);
  const ropeMode = opts.rope || 'half', grp = H / KV;
  const kvOf = opts.gqa === 'mod' ? (h) => h % KV : (h) => Math.floor(h / grp);
  const emb = S.get('model.embed_tokens.weight');
  let h = IDS.map((id) => Float64Array.from(emb.subarray(id * D, (id + 1) * D)));
  const routing = [];
  for (let l = 0; l < cfg.num_hidden_layers; l++) {
    const p = `model.layers.${l}.`, g = (n) => S.get(p + n);
    const x = rmsNorm(h, g('input_layernorm.weight'), eps);
    const biasMode = S.t.has(p + 'self_attn.q_proj.bias') ? opts.qkvBias || 'before_rope' : 'none';
    const bias = (n) => (biasMode === 'none' ? null : g(n));
    const pre = biasMode === 'before_rope' ? bias : () => null;
    const addBias = (X, b) => (b ? X.map((r) => r.map((vv, i) => vv + b[i])) : X);
    const post = (X, n) => (biasMode === 'after_rope' ? addBias(X, g(n)) : X);
    const normMode = S.t.has(p + 'self_attn.q_norm.weight') ? opts.qkNorm || 'head' : 'none';
    const qkNorm = (X, n, when) => {
      if (normMode !== when && !(when === 'before' && (normMode === 'head' || normMode === 'whole'))) return X;
      const w = g(n), eps = configValue(cfg, 'rms_norm_eps');
      if (normMode === 'whole') return rmsNorm(X, Float64Array.from({ length: X[0].length }, (_, i) => w[i % hd]), eps);
      return X.map((r) => {
        const out = new Float64Array(r.length);
        for (let h0 = 0; h0 < r.length; h0 += hd) {
          const [y] = rmsNorm([r.subarray(h0, h0 + hd)], w, eps);
          out.set(y, h0);
        }
        return out;
      });
    };
    const qp = qkNorm(linear(x, g('self_attn.q_proj.weight'), pre('self_attn.q_proj.bias'), D, H * hd), 'self_attn.q_norm.weight', 'before');
    const kp = qkNorm(linear(x, g('self_attn.k_proj.weight'), pre('self_attn.k_proj.bias'), D, KV * hd), 'self_attn.k_norm.weight', 'before');
    const q = qkNorm(post(applyRope(qp, H, hd, inv, ropeMode, mag), 'self_attn.q_proj.bias'), 'self_attn.q_norm.weight', 'after_rope');
    const k = qkNorm(post(applyRope(kp, KV, hd, inv, ropeMode, mag), 'self_attn.k_proj.bias'), 'self_attn.k_norm.weight', 'after_rope');
    const v = linear(x, g('self_attn.v_proj.weight'), bias('self_attn.v_proj.bias'), D, KV * hd);
    const win = opts.window !== undefined ? opts.window : layerWindow(cfg, l);
    const att = causalAttention(q, k, v, H, hd, kvOf, Math.pow(hd, -0.5), win);
    h = add(h, linear(att, g('self_attn.o_proj.weight'), null, H * hd, D));
    const y = rmsNorm(h, g('post_attention_layernorm.weight'), eps);
    let m;
    const ms = moe ? moeSpec(cfg) : null;
    if (!ms || !ms.has(l)) {
      const [gn, un] = opts.swapW13 ? ['mlp.up_proj.weight', 'mlp.gate_proj.weight'] : ['mlp.gate_proj.weight', 'mlp.up_proj.weight'];
      const gt = linear(y, g(gn), null, D, I), up = linear(y, g(un), null, D, I);
      m = linear(gt.map((r, t) => r.map((vv, i) => silu(vv) * up[t][i])), g('mlp.down_proj.weight'), null, I, D);
    } else {
      const E = ms.E, K = cfg.num_experts_per_tok, Ie = ms.I;
      const renorm = opts.moeRenorm === undefined ? ms.renorm : opts.moeRenorm;
      const rl = linear(y, g(ms.gate), null, D, E);
      m = zeros(T, D);
      const layerRoute = [];
      for (let t = 0; t < T; t++) {
        const pr = softmax(Array.from(rl[t]));
        const order = pr.map((vv, e) => [vv, e]).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
        const sel = order.slice(0, K);
        let wsum = 0; for (const [w] of sel) wsum += w;
        const gap = order[K - 1][0] - order[K][0];
        layerRoute.push({ experts: sel.map((s) => s[1]), gap, probs: pr });
        for (const [w0, e] of sel) {
          const w = renorm ? w0 / wsum : w0;
          const q2 = p + ms.expert(e);
          const [n1, n3] = opts.swapW13 ? [ms.w3, ms.w1] : [ms.w1, ms.w3];
          const yt = [y[t]];
          const a1 = linear(yt, S.get(q2 + n1), null, D, Ie)[0], a3 = linear(yt, S.get(q2 + n3), null, D, Ie)[0];
          const o = linear([a1.map((vv, i) => silu(vv) * a3[i])], S.get(q2 + ms.w2), null, Ie, D)[0];
          for (let i = 0; i < D; i++) m[t][i] += w * o[i];
        }
      }
      if (ms.shared) {
        const q = p + ms.shared.prefix, Is = ms.shared.I, mode = opts.sharedGate || 'sigmoid';
        const a1 = linear(y, S.get(q + 'gate_proj.weight'), null, D, Is);
        const a3 = linear(y, S.get(q + 'up_proj.weight'), null, D, Is);
        const so = linear(a1.map((r, t) => r.map((vv, i) => silu(vv) * a3[t][i])), S.get(q + 'down_proj.weight'), null, Is, D);
        const gl = linear(y, g(ms.shared.gate), null, D, 1);
        for (let t = 0; t < T; t++) {
          let s = 1;
          if (mode === 'sigmoid') s = 1 / (1 + Math.exp(-gl[t][0]));
          if (mode === 'softmax_joint') s = softmax([...Array.from(rl[t]), gl[t][0]])[E];
          for (let i = 0; i < D; i++) m[t][i] += s * so[t][i];
        }
      }
      routing.push(layerRoute);
    }
    h = add(h, m);
  }
  h = rmsNorm(h, S.get('model.norm.weight'), eps);
  const head = cfg.tie_word_embeddings ? S.get('model.embed_tokens.weight') : S.get('lm_head.weight');
  return { logits: linear(h, head, null, D, V), routing };
}

// ------------------------------------------------------------- helpers ----
const maxAbs = (L) => { let m = 0; for (const r of L) for (const v of r) m = Math.max(m, Math.abs(v)); return m; };
const maxDiff = (A, B) => { let m = 0; for (let t = 0; t < A.length; t++) for (let i = 0; i < A[t].length; i++) m = Math.max(m, Math.abs(A[t][i] - B[t][i])); return m; };
const hex = (s) => '0x' + (s >>> 0).toString(16).toUpperCase();

function writeModel(outDir, name, cfg, S, logits, note) {
  const dir = path.join(outDir, name);
  fs.mkdirSync(dir, { recursive: true });
  const stBytes = writeSafetensors(path.join(dir, 'model.safetensors'), S);
  fs.writeFileSync(path.join(dir, 'config.json'), pyJson(cfg) + '\n');
  const lb = Buffer.alloc(T * V * 4);
  for (let t = 0; t < T; t++) for (let i = 0; i < V; i++) lb.writeFloatLE(Math.fround(logits[t][i]), 4 * (t * V + i));
  fs.writeFileSync(path.join(dir, 'reference_logits.f32'), lb);
  const ref = { ids: IDS, shape: [T, V], logits: 'reference_logits.f32', note };
  fs.writeFileSync(path.join(dir, 'reference.json'),
    '{\n' + Object.entries(ref).map(([k, v]) => `  ${JSON.stringify(k)}: ${JSON.stringify(v)}`).join(',\n') + '\n}\n');
  // self-check: independent re-read of the checkpoint and the logits file
  const chk = selfCheckSafetensors(path.join(dir, 'model.safetensors'), S);
  const lr = fs.readFileSync(path.join(dir, 'reference_logits.f32'));
  if (lr.length !== T * V * 4) throw new Error('logits size');
  for (let t = 0; t < T; t++) for (let i = 0; i < V; i++) {
    if (lr.readFloatLE(4 * (t * V + i)) !== Math.fround(logits[t][i])) throw new Error('logits round-trip');
  }
  const cj = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  if (cj.model_type !== cfg.model_type) throw new Error('config round-trip');
  const rj = JSON.parse(fs.readFileSync(path.join(dir, 'reference.json'), 'utf8'));
  if (JSON.stringify(rj.ids) !== JSON.stringify(IDS) || rj.shape[0] !== T || rj.shape[1] !== V) throw new Error('reference.json round-trip');
  console.log(`  wrote ${dir}: model.safetensors ${stBytes} B (${chk.tensors} tensors, header ${chk.headerLen} B, self-check OK), reference_logits.f32 ${lr.length} B`);
}

// mutations: [label, logits, required, frac = 1e-2]; a required mutation must
// move some logit by more than frac * max|logit|.
function report(name, real, mutations) {
  const ma = maxAbs(real), thr = 1e-2 * ma;
  console.log(`  max |logit| = ${ma.toFixed(6)}  (threshold for mutations: 1e-2*max = ${thr.toExponential(3)} unless stated)`);
  let ok = true;
  for (const [label, L, required, frac] of mutations) {
    const d = maxDiff(real, L);
    const t = frac === undefined ? thr : frac * ma;
    const pass = d > t;
    if (required && !pass) ok = false;
    const tl = frac === undefined ? '' : ` [threshold ${frac}*max = ${t.toExponential(3)}]`;
    console.log(`  mutation ${required ? '[required]' : '[info]    '} ${label}: max |dlogit| = ${d.toFixed(6)} (${(d / ma).toFixed(3)} x max)${tl}${required ? (pass ? '  OK' : '  FAIL') : ''}`);
  }
  if (!ok) throw new Error(name + ': a required mutation is not distinguishable; raise weight scales');
}

// ---------------------------------------------------------------- main ----
function main() {
  const outDir = process.argv[2];
  if (!outDir) { console.error('usage: node make_hf_fixtures.js OUTDIR'); process.exit(2); }
  console.log(`ids (T=${T}, V=${V}): [${IDS.join(', ')}]`);

  // GPT-2
  {
    const seed = 0x6E720001;
    const S = gpt2Weights(seed);
    const real = gpt2Forward(S).logits;
    console.log(`gpt2 (GPT2LMHeadModel), seed ${hex(seed)}`);
    report('gpt2', real, [
      ['(b1) Conv1D weights read as nn.Linear (out,in) buffers [all c_attn/c_proj/c_fc]', gpt2Forward(S, { conv1dAsLinear: true }).logits, true],
      ['(b2) square attn.c_proj weights transposed', gpt2Forward(S, { transposeSquare: true }).logits, true],
      ['(b3) c_attn column blocks read as k|q|v instead of q|k|v', gpt2Forward(S, { qkvOrder: 'kqv' }).logits, true],
      ['(b4) c_attn column blocks read as q|v|k', gpt2Forward(S, { qkvOrder: 'qvk' }).logits, true],
      ['erf gelu instead of gelu_new (tanh approx)', gpt2Forward(S, { gelu: 'exact' }).logits, false],
    ]);
    writeModel(outDir, 'gpt2', GPT2_CFG, S, real,
      `GPT2LMHeadModel forward (eager, fp32 weights, computed in float64 by an independent JS implementation), batch 1, positions 0..${T - 1}, no padding; tied lm_head = wte; weights seed ${hex(seed)} (mulberry32 + Box-Muller)`);
  }

  // Llama
  {
    const seed = 0x11A3A001;
    const S = decoderWeights(LLAMA_CFG, seed, false);
    const real = decoderForward(LLAMA_CFG, S, false).logits;
    console.log(`llama (LlamaForCausalLM), seed ${hex(seed)}`);
    report('llama', real, [
      ['(a1) interleaved-pair RoPE instead of rotate_half', decoderForward(LLAMA_CFG, S, false, { rope: 'interleave' }).logits, true],
      ['(a2) rotate_half halves swapped the wrong way (cat(x2,-x1))', decoderForward(LLAMA_CFG, S, false, { rope: 'half_neg' }).logits, true],
      ['(c) GQA kv head = h % n_kv instead of floor(h/(n_head/n_kv))', decoderForward(LLAMA_CFG, S, false, { gqa: 'mod' }).logits, true],
      ['gate_proj/up_proj swapped', decoderForward(LLAMA_CFG, S, false, { swapW13: true }).logits, false],
    ]);
    writeModel(outDir, 'llama', LLAMA_CFG, S, real,
      `LlamaForCausalLM forward (eager, fp32 weights, computed in float64 by an independent JS implementation), batch 1, positions 0..${T - 1}, no padding; rotate_half RoPE, GQA 4q/2kv, untied lm_head; weights seed ${hex(seed)} (mulberry32 + Box-Muller)`);
  }

  // Llama with Llama 3.1 rope_scaling (rope_type "llama3")
  {
    const seed = 0x11A3A301, QK_STD = 0.5;
    const cfg = LLAMA3_CFG, rs = cfg.rope_scaling;
    const S = decoderWeights(cfg, seed, false, QK_STD);
    console.log(`llama3 (LlamaForCausalLM, rope_scaling llama3), seed ${hex(seed)}, q_proj/k_proj std ${QK_STD}`);
    const l3 = llama3InvFreq(defaultInvFreq(configValue(cfg, 'rope_theta'), cfg.head_dim), rs);
    console.log(`  rope_theta ${configValue(cfg, 'rope_theta')}, head_dim ${cfg.head_dim}, factor ${configValue(rs, 'factor')}, low/high_freq_factor ${configValue(rs, 'low_freq_factor')}/${configValue(rs, 'high_freq_factor')}, original_max_position_embeddings ${rs.original_max_position_embeddings}`);
    console.log(`  low_freq_wavelen ${l3.lowW}, high_freq_wavelen ${l3.highW}`);
    l3.rows.forEach((r, j) => console.log(`  j=${j}: inv_freq ${r.inv0.toPrecision(10)}  wavelen ${r.wavelen.toPrecision(10)}  branch ${r.branch.padEnd(6)}  smooth ${r.smooth.toPrecision(6)}  -> inv_freq ${r.inv.toPrecision(10)} (x${(r.inv / r.inv0).toPrecision(6)})`));
    const branches = l3.rows.map((r) => r.branch).join(',');
    if (branches !== 'high,medium,low,low') throw new Error('llama3: expected branches high,medium,low,low, got ' + branches);
    const real = decoderForward(cfg, S, false).logits;
    report('llama3', real, [
      ['(r1) plain RoPE (rope_scaling ignored)', decoderForward(cfg, S, false, { ropeScaling: 'none' }).logits, true, 1e-3],
      ['(r2) every inv_freq divided by factor (linear scaling, no bands)', decoderForward(cfg, S, false, { ropeScaling: 'linear' }).logits, true, 1e-3],
      ['(r3) medium band left unscaled (no smoothing; only low band / factor)', decoderForward(cfg, S, false, { ropeScaling: 'no_smooth_keep' }).logits, true, 1e-3],
      ['(r4) medium band divided by factor (no smoothing)', decoderForward(cfg, S, false, { ropeScaling: 'no_smooth_div' }).logits, true, 1e-3],
      ['(r5) low band not divided by factor (medium band still smoothed)', decoderForward(cfg, S, false, { ropeScaling: 'low_keep' }).logits, true, 1e-3],
      ['(a1) interleaved-pair RoPE instead of rotate_half', decoderForward(cfg, S, false, { rope: 'interleave' }).logits, true],
      ['(a2) rotate_half halves swapped the wrong way (cat(x2,-x1))', decoderForward(cfg, S, false, { rope: 'half_neg' }).logits, true],
      ['(c) GQA kv head = h % n_kv instead of floor(h/(n_head/n_kv))', decoderForward(cfg, S, false, { gqa: 'mod' }).logits, true],
    ]);
    writeModel(outDir, 'llama3', cfg, S, real,
      `LlamaForCausalLM forward (eager, fp32 weights, computed in float64 by an independent JS implementation), batch 1, positions 0..${T - 1}, no padding; rotate_half RoPE with rope_scaling rope_type llama3 (factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 256; inv_freq per transformers _compute_llama3_parameters: [${l3.rows.map((r) => r.branch).join(', ')}] for j=0..3, attention_factor 1), GQA 4q/2kv, untied lm_head; weights seed ${hex(seed)} (mulberry32 + Box-Muller), q_proj/k_proj std ${QK_STD}`);
  }

  // Llama with YaRN rope_scaling
  {
    const seed = 0x11A3A501, QK_STD = 0.5;
    const cfg = LLAMA_YARN_CFG;
    const S = decoderWeights(cfg, seed, false, QK_STD);
    const y = yarnInvFreq(defaultInvFreq(configValue(cfg, 'rope_theta'), cfg.head_dim), cfg);
    console.log(`llama_yarn (LlamaForCausalLM, rope_scaling yarn), seed ${hex(seed)}, q_proj/k_proj std ${QK_STD}`);
    console.log(`  ramp from pair ${y.low} to ${y.high}; inv_freq [${y.inv.map((v) => v.toPrecision(6)).join(', ')}]; attention factor ${yarnAttentionFactor(cfg.rope_scaling)}`);
    const real = decoderForward(cfg, S, false).logits;
    report('llama_yarn', real, [
      ['(y1) attention factor left out (cos/sin unscaled)', decoderForward(cfg, S, false, { noAttentionFactor: true }).logits, true],
      ['(y2) every frequency / factor (no ramp)', decoderForward(cfg, S, false, { ropeScaling: 'linear' }).logits, true, 1e-3],
      ['(y3) plain RoPE frequencies (attention factor kept)', decoderForward(cfg, S, false, { ropeScaling: 'none' }).logits, true],
      ['(y4) ramp from max_position_embeddings, not the original', decoderForward(cfg, S, false, { ropeScaling: 'max_positions' }).logits, true, 1e-3],
      ['(y5) ramp ends not rounded (truncate false)', decoderForward(cfg, S, false, { ropeScaling: 'no_truncate' }).logits, false, 1e-3],
    ]);
    writeModel(outDir, 'llama_yarn', cfg, S, real,
      `LlamaForCausalLM forward (eager, fp32 weights, computed in float64 by an independent JS implementation), batch 1, positions 0..${T - 1}, no padding; rotate_half RoPE with rope_scaling rope_type yarn (factor 4, original_max_position_embeddings 256, beta_fast 32, beta_slow 1: ramp from pair ${y.low} to ${y.high}; cos/sin x attention factor 0.1 ln 4 + 1), GQA 4q/2kv, untied lm_head; weights seed ${hex(seed)} (mulberry32 + Box-Muller), q_proj/k_proj std ${QK_STD}`);
  }

  // Qwen2: Llama with q/k/v biases, tied embeddings
  {
    const seed = 0x0A3E2001, QK_STD = 0.5, BIAS_STD = 0.5;
    const cfg = QWEN2_CFG;
    const S = decoderWeights(cfg, seed, false, QK_STD, BIAS_STD);
    const real = decoderForward(cfg, S, false).logits;
    console.log(`qwen2 (Qwen2ForCausalLM), seed ${hex(seed)}, q_proj/k_proj std ${QK_STD}, q/k/v bias std ${BIAS_STD}`);
    report('qwen2', real, [
      ['(q1) q/k/v biases ignored', decoderForward(cfg, S, false, { qkvBias: 'none' }).logits, true],
      ['(q2) q/k biases added after RoPE', decoderForward(cfg, S, false, { qkvBias: 'after_rope' }).logits, true],
      ['(a1) interleaved-pair RoPE instead of rotate_half', decoderForward(cfg, S, false, { rope: 'interleave' }).logits, true],
      ['(c) GQA kv head = h % n_kv instead of floor(h/(n_head/n_kv))', decoderForward(cfg, S, false, { gqa: 'mod' }).logits, true],
    ]);
    writeModel(outDir, 'qwen2', cfg, S, real,
      `Qwen2ForCausalLM forward (eager, fp32 weights, computed in float64 by an independent JS implementation), batch 1, positions 0..${T - 1}, no padding; q/k/v biases added before rotate_half RoPE, no o_proj bias, GQA 4q/2kv, rope_theta 1e6, tied lm_head = embed_tokens; weights seed ${hex(seed)} (mulberry32 + Box-Muller), q_proj/k_proj std ${QK_STD}, q/k/v bias std ${BIAS_STD}`);
  }

  // Qwen3: Llama with per-head q/k RMSNorm before RoPE, tied embeddings
  {
    const seed = 0x0A3E3001, QK_STD = 0.5, NORM_STD = 0.5;
    const cfg = QWEN3_CFG;
    const S = decoderWeights(cfg, seed, false, QK_STD, SCALE.bias, NORM_STD);
    const real = decoderForward(cfg, S, false).logits;
    console.log(`qwen3 (Qwen3ForCausalLM), seed ${hex(seed)}, q_proj/k_proj std ${QK_STD}, q/k norm weights 1 + ${NORM_STD} N(0,1)`);
    report('qwen3', real, [
      ['(n1) q/k norms left out', decoderForward(cfg, S, false, { qkNorm: 'none' }).logits, true],
      ['(n2) q/k norms after RoPE', decoderForward(cfg, S, false, { qkNorm: 'after_rope' }).logits, true],
      ['(n3) q/k norms over all heads at once (OLMo2-style)', decoderForward(cfg, S, false, { qkNorm: 'whole' }).logits, true],
      ['(a1) interleaved-pair RoPE instead of rotate_half', decoderForward(cfg, S, false, { rope: 'interleave' }).logits, true],
      ['(c) GQA kv head = h % n_kv instead of floor(h/(n_head/n_kv))', decoderForward(cfg, S, false, { gqa: 'mod' }).logits, true],
    ]);
    writeModel(outDir, 'qwen3', cfg, S, real,
      `Qwen3ForCausalLM forward (eager, fp32 weights, computed in float64 by an independent JS implementation), batch 1, positions 0..${T - 1}, no padding; RMSNorm (eps 1e-6) of each q and k head over head_dim before rotate_half RoPE, no biases, GQA 4q/2kv of head_dim 16 (q_proj 64 x 32, o_proj 32 x 64), rope_theta 1e6, tied lm_head = embed_tokens; weights seed ${hex(seed)} (mulberry32 + Box-Muller), q_proj/k_proj std ${QK_STD}, q/k norm weights 1 + ${NORM_STD} N(0,1)`);
  }

  // Mixtral: search for a seed with robust routing and full expert coverage
  {
    const { seed, S, res, tries } = moeSeed('mixtral', MIXTRAL_CFG, 0x313A0001);
    const real = res.logits;
    console.log(`mixtral (MixtralForCausalLM), seed ${hex(seed)} (accepted after ${tries} tr${tries === 1 ? 'y' : 'ies'})`);
    printRouting(MIXTRAL_CFG, res);
    report('mixtral', real, [
      ['(a1) interleaved-pair RoPE instead of rotate_half', decoderForward(MIXTRAL_CFG, S, true, { rope: 'interleave' }).logits, true],
      ['(a2) rotate_half halves swapped the wrong way (cat(x2,-x1))', decoderForward(MIXTRAL_CFG, S, true, { rope: 'half_neg' }).logits, true],
      ['(c) GQA kv head = h % n_kv instead of floor(h/(n_head/n_kv))', decoderForward(MIXTRAL_CFG, S, true, { gqa: 'mod' }).logits, true],
      ['top-2 weights not renormalised', decoderForward(MIXTRAL_CFG, S, true, { moeRenorm: false }).logits, false],
      ['w1/w3 swapped', decoderForward(MIXTRAL_CFG, S, true, { swapW13: true }).logits, false],
    ]);
    const minGap = Math.min(...res.routing.flat().map((r) => r.gap));
    writeModel(outDir, 'mixtral', MIXTRAL_CFG, S, real,
      `MixtralForCausalLM forward (eager, fp32 weights, computed in float64 by an independent JS implementation), batch 1, positions 0..${T - 1}, no padding; top-2 of 4 experts, softmax over all experts then renormalised; every layer/token has p(2nd)-p(3rd) > 1e-3 (min ${minGap.toExponential(3)}) and every expert is used in every layer; weights seed ${hex(seed)} (mulberry32 + Box-Muller)`);
  }
  // Qwen3-MoE: Qwen3's attention, a dense MLP in layer 0 and a sparse MoE
  // block (top-2 of 4, not renormalised) in layer 1, untied head
  {
    const QK_STD = 0.5, NORM_STD = 0.5, cfg = QWEN3_MOE_CFG;
    const { seed, S, res, tries } = moeSeed('qwen3_moe', cfg, 0x0A3E3E01, QK_STD, NORM_STD);
    const real = res.logits;
    console.log(`qwen3_moe (Qwen3MoeForCausalLM), seed ${hex(seed)} (accepted after ${tries} tr${tries === 1 ? 'y' : 'ies'}), q_proj/k_proj std ${QK_STD}, q/k norm weights 1 + ${NORM_STD} N(0,1)`);
    printRouting(cfg, res);
    report('qwen3_moe', real, [
      ['(m1) top-2 weights renormalised (norm_topk_prob ignored)', decoderForward(cfg, S, true, { moeRenorm: true }).logits, true],
      ['(m2) gate_proj/up_proj swapped in the experts', decoderForward(cfg, S, true, { swapW13: true }).logits, true],
      ['(n1) q/k norms left out', decoderForward(cfg, S, true, { qkNorm: 'none' }).logits, true],
      ['(a1) interleaved-pair RoPE instead of rotate_half', decoderForward(cfg, S, true, { rope: 'interleave' }).logits, true],
      ['(c) GQA kv head = h % n_kv instead of floor(h/(n_head/n_kv))', decoderForward(cfg, S, true, { gqa: 'mod' }).logits, true],
    ]);
    const minGap = Math.min(...res.routing.flat().map((r) => r.gap));
    writeModel(outDir, 'qwen3_moe', cfg, S, real,
      `Qwen3MoeForCausalLM forward (eager, fp32 weights, computed in float64 by an independent JS implementation), batch 1, positions 0..${T - 1}, no padding; Qwen3 attention (per-head q/k RMSNorm before rotate_half RoPE, GQA 4q/2kv of head_dim 16); layer 0 a dense MLP (intermediate 48), layer 1 (decoder_sparse_step 2) a sparse MoE block: top-2 of 4 experts (moe_intermediate 24) by softmax over all experts, not renormalised (norm_topk_prob false); every token has p(2nd)-p(3rd) > 1e-3 (min ${minGap.toExponential(3)}) and every expert is used; untied lm_head; weights seed ${hex(seed)} (mulberry32 + Box-Muller), q_proj/k_proj std ${QK_STD}, q/k norm weights 1 + ${NORM_STD} N(0,1)`);
  }
  // Qwen2-MoE: Qwen2's attention (q/k/v biases), a dense MLP in layer 0
  // (mlp_only_layers [0]), in layer 1 top-2 of 4 not renormalised plus the
  // sigmoid-gated shared expert, untied head
  {
    const QK_STD = 0.5, BIAS_STD = 0.5, cfg = QWEN2_MOE_CFG;
    const { seed, S, res, tries } = moeSeed('qwen2_moe', cfg, 0x0A3E2E01, QK_STD, SCALE.normW, BIAS_STD);
    const real = res.logits;
    console.log(`qwen2_moe (Qwen2MoeForCausalLM), seed ${hex(seed)} (accepted after ${tries} tr${tries === 1 ? 'y' : 'ies'}), q_proj/k_proj std ${QK_STD}, q/k/v bias std ${BIAS_STD}`);
    printRouting(cfg, res);
    report('qwen2_moe', real, [
      ['(s1) shared expert ungated', decoderForward(cfg, S, true, { sharedGate: 'none' }).logits, true],
      ['(s2) shared gate logit inside the router softmax', decoderForward(cfg, S, true, { sharedGate: 'softmax_joint' }).logits, true],
      ['(m1) top-2 weights renormalised (norm_topk_prob ignored)', decoderForward(cfg, S, true, { moeRenorm: true }).logits, true],
      ['(q1) q/k/v biases ignored', decoderForward(cfg, S, true, { qkvBias: 'none' }).logits, true],
      ['(m2) gate_proj/up_proj swapped in the experts', decoderForward(cfg, S, true, { swapW13: true }).logits, true],
    ]);
    const minGap = Math.min(...res.routing.flat().map((r) => r.gap));
    writeModel(outDir, 'qwen2_moe', cfg, S, real,
      `Qwen2MoeForCausalLM forward (eager, fp32 weights, computed in float64 by an independent JS implementation), batch 1, positions 0..${T - 1}, no padding; Qwen2 attention (q/k/v biases before rotate_half RoPE, GQA 4q/2kv, head_dim 8 = hidden_size / heads); layer 0 a dense MLP (mlp_only_layers [0], intermediate 48), layer 1 a sparse MoE block: top-2 of 4 experts (moe_intermediate 24) by softmax over all experts, not renormalised, plus sigmoid(shared_expert_gate(x)) x shared_expert(x) (shared_expert_intermediate 48); every token has p(2nd)-p(3rd) > 1e-3 (min ${minGap.toExponential(3)}) and every expert is used; untied lm_head; weights seed ${hex(seed)} (mulberry32 + Box-Muller), q_proj/k_proj std ${QK_STD}, q/k/v bias std ${BIAS_STD}`);
  }
  // Mistral: Llama with a sliding window of 4 keys in every layer
  {
    const seed = 0x3157A001, QK_STD = 0.5, cfg = MISTRAL_CFG, W = cfg.sliding_window;
    const S = decoderWeights(cfg, seed, false, QK_STD);
    const real = decoderForward(cfg, S, false).logits;
    const rows = IDS.filter((_, t) => t >= W).length;
    console.log(`mistral (MistralForCausalLM), seed ${hex(seed)}, q_proj/k_proj std ${QK_STD}, sliding_window ${W}: ${rows} of ${T} rows windowed`);
    report('mistral', real, [
      ['(w1) full causal attention (sliding_window ignored)', decoderForward(cfg, S, false, { window: 0 }).logits, true],
      ['(w2) window one key wider (kv >= q - W)', decoderForward(cfg, S, false, { window: W + 1 }).logits, true],
      ['(w3) window one key narrower (kv > q - W + 1)', decoderForward(cfg, S, false, { window: W - 1 }).logits, true],
      ['(a1) interleaved-pair RoPE instead of rotate_half', decoderForward(cfg, S, false, { rope: 'interleave' }).logits, true],
      ['(c) GQA kv head = h % n_kv instead of floor(h/(n_head/n_kv))', decoderForward(cfg, S, false, { gqa: 'mod' }).logits, true],
    ]);
    writeModel(outDir, 'mistral', cfg, S, real,
      `MistralForCausalLM forward (eager, fp32 weights, computed in float64 by an independent JS implementation), batch 1, positions 0..${T - 1}, no padding; sliding_window ${W} in every layer: query q sees keys q-${W - 1}..q (sliding_window_overlay kv > q - ${W} and causal kv <= q), ${rows} of ${T} rows windowed; rotate_half RoPE (theta 1e6), GQA 4q/2kv, rms_norm_eps 1e-5, untied lm_head; weights seed ${hex(seed)} (mulberry32 + Box-Muller), q_proj/k_proj std ${QK_STD}`);
  }
  console.log('done');
}

// The first seed from seed0 on whose routing is robust (in every MoE layer,
// for every token, p(k-th) - p(k+1-th) > 1e-3, so fp32 rounding cannot
// change the experts picked) and covers every expert.
function moeSeed(name, cfg, seed0, qkStd = SCALE.lin, qkNormStd = SCALE.normW, qkvBiasStd = SCALE.bias) {
  const GAP = 1e-3, E = moeSpec(cfg).E;
  let seed = seed0, tries = 0;
  for (;;) {
    tries++;
    const S = decoderWeights(cfg, seed, true, qkStd, qkvBiasStd, qkNormStd);
    const res = decoderForward(cfg, S, true);
    const minGap = Math.min(...res.routing.flat().map((r) => r.gap));
    const covered = res.routing.every((L) => new Set(L.flatMap((r) => r.experts)).size === E);
    if (minGap > GAP && covered) return { seed, S, res, tries };
    console.log(`${name} seed ${hex(seed)} rejected (min top2/top3 gap ${minGap.toExponential(3)}, all experts used: ${covered})`);
    seed = (seed + 1) >>> 0;
    if (tries > 1000) throw new Error(`no ${name} seed found`);
  }
}

function printRouting(cfg, res) {
  res.routing.forEach((L, l) => {
    const counts = new Array(moeSpec(cfg).E).fill(0);
    for (const r of L) for (const e of r.experts) counts[e]++;
    const mg = Math.min(...L.map((r) => r.gap));
    console.log(`  MoE block ${l}: tokens per expert [${counts.join(', ')}], min p(2nd)-p(3rd) gap = ${mg.toExponential(3)}`);
    console.log(`    top-2 per token: ${L.map((r) => r.experts.join('')).join(' ')}`);
  });
}

// make_hf_fixture_deepseek_v3.js builds on these.
module.exports = {
  Store, F, configValue, linear, rmsNorm, add, silu, softmax, zeros, defaultInvFreq, applyRope,
  yarnInvFreq, maxAbs, maxDiff, hex, writeModel, report, V, T, IDS, SCALE,
};
if (require.main === module) main();
