/**
 * tests/emu: the fused kernels (kernels/fused.cu) run on the host emulator (build.sh) against the CPU backend.
 *
 * Per case: the inputs are made on three CPU devices by one builder (same buffers, same order, same bytes):
 *   1. the CPU backend runs layerNorm / rmsNorm with the fused options: the expected h, y (or quantized bytes),
 *      scales, mean, rstd; normForward (ops/cpu.ts, float64) gives y before rounding, for the tolerances;
 *   2. a fake CUDA device (tests/fixtures/fake_cuda.ts) runs the same call: the library picks the kernel, grid, block
 *      and packs the 28 arguments, which are recorded; every buffer gets a distinct fake device address;
 *   3. the emulator runs that launch over the input bytes; its output bytes are put into the third device's buffers
 *      and read back through the same tensor views.
 * Tolerances: tests/fixtures/fused_cases.ts. Batch invariance: the same rows in launches of 1, 7 and 33 rows and in groups
 * of 4 (the latency split on the 4-SM fake device), bitwise: y, h, scales, mean and rstd.
 *
 *   deno run -A tests/emu/run.ts [--quick] [--filter SUBSTRING] [--keep]
 */
import { Device, layerNorm, layerNormBackward, loadKernels, rmsNorm, rmsNormBackward, type Tensor } from "../../mod.ts";
import type { DType, QuantDType } from "../../runtime/dtype.ts";
import { ulpOf } from "../../runtime/dtype.ts";
import { DeviceBuffer } from "../../runtime/memory.ts";
import { ffi } from "../../ffi/runtime.ts";
import { FUSED_ADD_ARGS, FUSED_ARGS } from "../../ops/fused_abi.ts";
import { NORM_FWD_ARGS } from "../../ops/kernels.ts";
import type { ArgType } from "../../runtime/module.ts";
import { normForward, quantizeRow } from "../../ops/cpu.ts";
import { normBackward } from "../../ops/cpu_bwd.ts";
import { FAKE_H200, fakeCudaDevice } from "../fixtures/fake_cuda.ts";
import { randoms } from "../fixtures/random.ts";
import { markCaseRows, quantError } from "../fixtures/fused_cases.ts";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";

const HERE = new URL(".", import.meta.url).pathname;
const argv = Deno.args;
const quick = argv.includes("--quick");
const keep = argv.includes("--keep");
const filter = argv.includes("--filter") ? argv[argv.indexOf("--filter") + 1] : undefined;
// --sanitize thread|address: the emulator built with that sanitizer (-O1 -g), in a directory of its own.
const sanitize = argv.includes("--sanitize") ? argv[argv.indexOf("--sanitize") + 1] : undefined;
const WORK = sanitize ? `/tmp/fused_emu_${sanitize}` : "/tmp/fused_emu";
const BIN = `${WORK}/fused_emu`;

// ---------------------------------------------------------------- fake device addresses for CPU buffers
// Every DeviceBuffer whose ptr is 0n (a CPU buffer) gets a distinct address at its first read, 4 KiB aligned, so that
// the recorded arguments tell x from residual from null and keep their alignment. Real device pointers (the fake
// driver's memAlloc below) pass through.
const desc = Object.getOwnPropertyDescriptor(DeviceBuffer.prototype, "ptr")!;
const fakeBase = new WeakMap<DeviceBuffer, bigint>();
let nextBase = 1n << 40n;
let trackBuffers: DeviceBuffer[] | undefined;
Object.defineProperty(DeviceBuffer.prototype, "ptr", {
  get(this: DeviceBuffer) {
    const p = desc.get!.call(this) as bigint;
    if (p !== 0n || !trackBuffers) return p;
    let b = fakeBase.get(this);
    if (b === undefined) {
      b = nextBase;
      nextBase += ((BigInt(this.byteLength) + 0xfffffn) & ~0xfffffn) + 0x100000n;
      fakeBase.set(this, b);
    }
    return b;
  },
});

// ---------------------------------------------------------------- cases
type Kind = "layer" | "rms";
type FDType = "f32" | "f16" | "bf16";
interface Case {
  kind: Kind;
  dtype: FDType;
  d: number;
  rows: number;
  residual: "none" | "inplace" | "out";
  quant: "none" | "static" | "static-tensor" | "dynamic";
  qdtype?: QuantDType;
  paramsOfX?: boolean;
  strided?: boolean; // x's rows d + 3 apart
  special?: boolean; // row 1 zeros, row 2 one NaN, row 3 one infinite x
  outlier?: boolean; // odd rows: x's first element 64, LayerNorm's shift far from the row's mean (the centred pass)
  noWeight?: boolean;
  noBias?: boolean;
  ub?: number; // dynamic: scale upper bound
  qk?: { tokens: number; hq: number; hkv: number }; // d = headDim; x = [tokens, hq + hkv, d] view of a QKV buffer
  sub?: { first: number; count: number }; // run on rows [first, first + count) of the rows (batch invariance)
  corrupt?: "y" | "h" | "pad" | "scale"; // --self-test: the emulator's output altered, the check must fail
  grid?: number; // the emulator launches this many blocks instead of the library's grid (the kernel grid-strides)
  tuned?: boolean; // a plain call without batchInvariant: the plain norm's tuned plan (ops/plan.ts)
}
const name = (c: Case): string =>
  `${c.kind} ${c.dtype} d=${c.d} rows=${c.qk ? `${c.qk.tokens}x(${c.qk.hq}+${c.qk.hkv}) qk` : c.rows}` +
  (c.sub ? ` [rows ${c.sub.first}..${c.sub.first + c.sub.count - 1}]` : "") + (c.grid ? ` grid=${c.grid}` : "") +
  (c.corrupt ? ` corrupt ${c.corrupt}` : "") + (c.strided ? " strided" : "") +
  (c.residual !== "none" ? ` +res(${c.residual})` : "") + (c.quant !== "none" ? ` ${c.quant} ${c.qdtype}` : "") +
  (c.ub ? ` ub=${c.ub}` : "") + (c.paramsOfX ? " params-of-x" : "") + (c.noWeight ? " no-weight" : "") +
  (c.noBias ? " no-bias" : "") + (c.special ? " zero/NaN/Inf rows" : "") + (c.outlier ? " outlier rows" : "") +
  (c.tuned ? " tuned plan" : "");

function seedOf(c: Case): number {
  let h = 17;
  const s = name({ ...c, sub: undefined, grid: undefined, corrupt: undefined });
  for (const ch of s) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return h;
}

// ---------------------------------------------------------------- the builder (same buffers in the same order)
interface Built {
  x: Tensor;
  res?: Tensor;
  hT?: Tensor; // where h goes
  y: Tensor;
  all: Tensor[]; // every allocation, in order (the base tensors)
  inputs: Tensor[]; // read-only in the call
  written: Tensor[]; // views the call writes (y, h)
  scaleOut?: Tensor; // dynamic scales given to the call (compared by value)
  bias?: Tensor;
  call: () => { y: Tensor; mean?: Tensor; rstd?: Tensor; scale?: Tensor };
  ref: () => ReturnType<typeof normForward>; // float64 reference from the inputs as held (call before `call`)
  rows: number;
}

function build(dev: Device, c: Case): Built {
  const { kind, dtype, d } = c, seed = seedOf(c);
  const all: Tensor[] = [];
  const keep = <T extends Tensor>(t: T): T => (all.push(t), t);
  const pdtype: DType = c.paramsOfX ? dtype : "f32";
  const eps = kind === "layer" ? 1e-5 : 1e-6;
  let x: Tensor, xBase: Tensor, y: Tensor, rows: number, heads = 0;
  let res: Tensor | undefined, hT: Tensor | undefined;
  let w2: Tensor | undefined;
  if (c.qk) {
    const { tokens, hq, hkv } = c.qk, width = (hq + 2 * hkv) * d;
    heads = hq + hkv;
    rows = tokens * heads;
    xBase = keep(dev.tensor(randoms(tokens * width, seed, -3, 3), [tokens, width], { dtype }));
    x = xBase.view([tokens, heads, d], { strides: [width, d, 1] });
    y = x; // in place, as QK-norm is used; with a residual or quantized, y apart ([tokens, heads, d], contiguous)
    if (c.residual !== "none") {
      res = keep(dev.tensor(randoms(rows * d, seed + 1, -2, 2), [tokens, heads, d], { dtype }));
    }
    if (c.residual === "out") hT = keep(dev.empty([tokens, heads, d], { dtype }));
    if (c.residual !== "none" || c.quant !== "none") {
      y = keep(dev.empty([tokens, heads, d], { dtype: c.quant === "none" ? dtype : c.qdtype! }));
      if (y.bytesPerElement === 1) y.write(new Uint8Array(y.numel).fill(0x7f), { bits: true });
      else y.write(new Float32Array(y.numel).fill(NaN));
    }
    if (hT) hT.write(new Float32Array(hT.numel).fill(NaN));
  } else {
    const total = c.rows, stride = c.strided ? d + 3 : d;
    const xv = randoms(total * d, seed, -3, 3), rv = randoms(total * d, seed + 1, -2, 2);
    markCaseRows(c, xv, rv, total, d);
    xBase = keep(dev.tensor(xv, [total, d], { dtype, rowStride: stride }));
    if (c.residual !== "none") res = keep(dev.tensor(rv, [total, d], { dtype }));
    if (c.residual === "out") hT = keep(dev.empty([total, d], { dtype }));
    const yd: DType = c.quant === "none" ? dtype : c.qdtype!;
    y = keep(dev.empty([total, d], { dtype: yd }));
    if (y.bytesPerElement === 1) y.write(new Uint8Array(y.numel).fill(0x7f), { bits: true });
    else y.write(new Float32Array(y.numel).fill(NaN));
    if (hT) hT.write(new Float32Array(hT.numel).fill(NaN));
    x = xBase;
    rows = total;
    if (c.sub) {
      const { first, count } = c.sub;
      const sub = (t: Tensor) => t.view([count, d], { strides: [t.rowStride, 1], offset: first * t.rowStride });
      x = sub(x), y = sub(y);
      if (res) res = sub(res);
      if (hT) hT = sub(hT);
      rows = count;
    }
  }
  const w = c.noWeight ? undefined : keep(dev.tensor(randoms(d, seed + 2, 0.5, 1.5), [d], { dtype: pdtype }));
  const b = kind === "layer" && !c.noBias
    ? keep(dev.tensor(randoms(d, seed + 3, -1, 1), [d], { dtype: pdtype }))
    : undefined;
  if (c.qk) w2 = keep(dev.tensor(randoms(d, seed + 4, -1.5, -0.5), [d], { dtype: pdtype }));
  const staticScale = (kind === "layer" ? 0.02 : 0.01) * (c.qdtype === "int8" ? 1 : 0.1);
  const scaleT = c.quant === "static-tensor" ? keep(dev.tensor(new Float32Array([staticScale]), [1])) : undefined;
  const scaleOut = c.quant === "dynamic" && !c.special ? keep(dev.empty([rows])) : undefined; // special: op allocates
  const quant = c.quant === "none" ? undefined : {
    dtype: c.qdtype!,
    ...(c.quant === "static" ? { scale: staticScale } : {}),
    ...(c.quant === "static-tensor" ? { scale: scaleT } : {}),
    ...(c.quant === "dynamic" ? { ...(scaleOut ? { scaleOut } : {}), ...(c.ub ? { scaleUpperBound: c.ub } : {}) } : {}),
  };
  const h = res ? (hT ?? res) : undefined;
  const opts = {
    weight: w,
    bias: b,
    eps,
    out: y,
    stats: true as const,
    batchInvariant: !c.tuned,
    ...(res ? { residual: res } : {}),
    ...(hT ? { residualOut: hT } : {}),
    ...(quant ? { quant } : {}),
    ...(c.qk ? { weight2: w2, split: c.qk.hq } : {}),
  };
  const inputs = all.filter((t) => t !== y && t !== h && t !== scaleOut);
  const written = [y, ...(h ? [h] : [])];
  return {
    x,
    res,
    hT: h,
    y,
    all,
    inputs,
    written,
    scaleOut,
    bias: b,
    rows,
    call: () => (kind === "layer" ? layerNorm(x, opts as never) : rmsNorm(x, opts as never)) as never,
    ref: () =>
      normForward({
        kind,
        rows,
        d,
        x: x.readSync(),
        xStride: d,
        residual: res?.readSync(),
        dtype,
        weight: w?.readSync(),
        bias: b?.readSync(),
        ...(c.qk ? { weight2: w2!.readSync(), heads, split: c.qk.hq } : {}),
        eps,
      }),
  };
}

// ---------------------------------------------------------------- the launch, recorded
/** A launch's arguments of these types, read back from its parameter array. */
function readParams(params: bigint, types: readonly ArgType[] = FUSED_ARGS): (bigint | number)[] {
  const slots = new BigUint64Array(ffi!.viewMemory(params, types.length * 8).slice(0));
  return types.map((type, i) => {
    const v = new DataView(ffi!.viewMemory(slots[i], 8).slice(0));
    return type === "ptr"
      ? v.getBigUint64(0, true)
      : type === "i64"
      ? Number(v.getBigInt64(0, true))
      : type === "f32"
      ? v.getUint32(0, true) // the bits
      : v.getInt32(0, true);
  });
}

/** An argument's line in the emulator's manifest (emu_main.cpp: p, l, f or i). */
const manifestArg = (type: ArgType, value: bigint | number): string =>
  `arg ${type === "ptr" ? "p" : type === "i64" ? "l" : type === "f32" ? "f" : "i"} ${value}`;

interface EmuOut {
  bytes: Map<DeviceBuffer | bigint, Uint8Array>; // per buffer (fake-built ones by object, op allocations by address)
  fake: Built;
  result: { y: Tensor; mean?: Tensor; rstd?: Tensor; scale?: Tensor };
  launch: { kernel: string; grid: number[]; block: number[]; args: (bigint | number)[] };
}

/**
 * An H200 with 4 SMs: the plan takes its latency split (one thread a chunk) for up to 4 rows and its bandwidth split
 * above, so that the invariance sets (1, 7 and 33 rows) compare rows computed by different splits.
 */
const EMU_DEVICE = { ...FAKE_H200, multiprocessors: 4 };

/**
 * The tuned forward kernels the emulator runs (emu_main.cpp: the mappings without clusters or cp.async). batchInvariant
 * on a plain norm takes the plain norm's prefill plan where it keeps a row's sums fixed (planNormInvariant in
 * ops/plan.ts); those launches run here like the fused ones.
 */
const EMULATED_TUNED = /^nk_(ln|rms)_(rows|rowstwopass|block|blockfull|latency|rowstile)_/;
/** The fused kernels (nk_fused_add_* aside). */
const FUSED_NORM = /^nk_fused_(ln|rms)_/;
/** The call launched a tuned kernel the emulator does not run (cluster, stash, wide). */
class TunedLaunch extends Error {
  constructor(readonly kernel: string) {
    super(`the tuned kernel ${kernel}, not a fused one`);
  }
}

let caseNo = 0;
async function emulate(c: Case): Promise<EmuOut> {
  trackBuffers = [];
  const allocs: { ptr: bigint; bytes: number }[] = [];
  let built!: Built;
  const f = await fakeCudaDevice((dev) => (built = build(dev, c)), {
    record: true,
    load: false,
    info: EMU_DEVICE,
    snapshot: (p, k) =>
      FUSED_NORM.test(k) ? readParams(p) : EMULATED_TUNED.test(k) ? readParams(p, NORM_FWD_ARGS) : undefined,
  });
  const drv = f.driver as unknown as Record<string, unknown>;
  let nextAlloc = 1n << 44n;
  drv.memAlloc = (bytes: number) => {
    const ptr = nextAlloc;
    nextAlloc += BigInt((bytes + 0xfffff) & ~0xfffff) + 0x100000n;
    allocs.push({ ptr, bytes });
    return ptr;
  };
  drv.memFree = () => {};
  // Memsets the op queues (RMSNorm's mean: zeros): applied to the allocation's initial bytes.
  const memsets: { ptr: bigint; value: number; bytes: number; width: 1 | 4 }[] = [];
  drv.memset32 = (ptr: bigint, value: number, count: number) =>
    memsets.push({ ptr, value, bytes: 4 * count, width: 4 });
  drv.memset8 = (ptr: bigint, value: number, bytes: number) => memsets.push({ ptr, value, bytes, width: 1 });
  await loadKernels(f.dev, { quant: true });
  const result = built.call();
  if (f.launches.length !== 1) throw new Error(`${name(c)}: ${f.launches.length} launches`);
  const l = f.launches[0];
  const onTuned = EMULATED_TUNED.test(l.kernel);
  if (!onTuned && !FUSED_NORM.test(l.kernel)) throw new TunedLaunch(l.kernel);
  const args = l.args as (bigint | number)[];
  const dir = `${WORK}/case${caseNo++}`;
  mkdirSync(dir, { recursive: true });
  const lines = [`kernel ${l.kernel}`, `grid ${c.grid ?? l.grid[0]}`, `block ${l.block[0]}`];
  if (l.grid[1] !== 1 || l.grid[2] !== 1 || l.block[1] !== 1 || l.block[2] !== 1) throw new Error("not a 1-D launch");
  const bufs = [...new Set(built.all.map((t) => t.buffer))];
  bufs.forEach((b, i) => {
    writeFileSync(`${dir}/in${i}`, b.hostBytes);
    lines.push(`buffer ${b.ptr} ${b.byteLength} ${dir}/in${i} ${dir}/out${i}`);
  });
  allocs.forEach((a, i) => {
    const init = new Uint8Array(a.bytes).fill(0xff); // NaN: unwritten f32 shows
    for (const m of memsets) {
      if (m.ptr !== a.ptr) continue;
      if (m.width === 1) init.fill(m.value & 0xff, 0, m.bytes);
      else new Uint32Array(init.buffer).fill(m.value >>> 0, 0, m.bytes / 4);
    }
    writeFileSync(`${dir}/ain${i}`, init);
    lines.push(`buffer ${a.ptr} ${a.bytes} ${dir}/ain${i} ${dir}/aout${i}`);
  });
  (onTuned ? NORM_FWD_ARGS : FUSED_ARGS).forEach((t, i) => lines.push(manifestArg(t, args[i])));
  writeFileSync(`${dir}/manifest`, lines.join("\n") + "\n");
  execFileSync(BIN, [`${dir}/manifest`], { stdio: ["ignore", "inherit", "inherit"] });
  const bytes = new Map<DeviceBuffer | bigint, Uint8Array>();
  bufs.forEach((b, i) => bytes.set(b, new Uint8Array(readFileSync(`${dir}/out${i}`))));
  allocs.forEach((a, i) => bytes.set(a.ptr, new Uint8Array(readFileSync(`${dir}/aout${i}`))));
  if (!keep) rmSync(dir, { recursive: true, force: true });
  trackBuffers = undefined;
  if (c.corrupt) {
    const at = (t: Tensor, r: number, i: number) => ({ b: bytes.get(t.buffer)!, k: byteIndex(t, r, i) });
    const { d } = c, y = built.y;
    if (c.corrupt === "y") {
      const { b, k } = at(y, 1, d >> 1);
      b[k + y.bytesPerElement - 1] ^= y.bytesPerElement === 1 ? 0x04 : 0x01;
    } else if (c.corrupt === "h") {
      const { b, k } = at(built.hT!, 2, 3);
      b[k] ^= 0x01; // one ulp
    } else if (c.corrupt === "pad") {
      const { b, k } = at(built.x, 0, d);
      b[k] ^= 0x01; // x's padding after row 0
    } else {
      const b = bytes.get(built.scaleOut!.buffer)!, v = new DataView(b.buffer, b.byteOffset);
      v.setFloat32(4, v.getFloat32(4, true) * (1 + 3e-5), true);
    }
  }
  const grid = [c.grid ?? l.grid[0], l.grid[1], l.grid[2]];
  return { bytes, fake: built, result, launch: { kernel: l.kernel, grid, block: l.block, args } };
}

// ---------------------------------------------------------------- one case
interface Outcome {
  name: string;
  kernel: string;
  geometry: string;
  worstY: number; // largest |y - ref| / tolerance (or quantized steps)
  failures: string[];
  yBytes: Uint8Array; // the emulator's y of the case's rows, packed (batch invariance)
  hBytes?: Uint8Array;
  scales?: Float32Array;
  mean?: Float32Array; // LayerNorm's
  rstd?: Float32Array;
}

/** Element byte positions of a view (row r, element i) in its buffer. */
function byteIndex(t: Tensor, r: number, i: number): number {
  const l = t.levels; // Tensor's own #rowStart, from its public levels
  const start = l.n0 <= 1 ? r * l.s1 : Math.floor(r / l.n1) * l.s0 + (r % l.n1) * l.s1;
  return (t.offset + start + i) * t.bytesPerElement;
}

function f32s(b: Uint8Array): Float32Array {
  return new Float32Array(b.slice().buffer);
}

async function runCase(c: Case): Promise<Outcome> {
  const n = name(c), failures: string[] = [];
  const fail = (m: string) => failures.length < 8 && failures.push(m);
  // 1. CPU backend.
  using cpu = Device.open({ backend: "cpu" });
  const e = build(cpu, c);
  const ref = e.ref();
  const inBytes = e.all.map((t) => t.buffer.hostBytes.slice());
  const er = e.call();
  const expH = e.hT?.readSync();
  const expScale = er.scale?.readSync();
  // 2-3. The library's launch on the emulator.
  const emu = await emulate(c);
  const { args } = emu.launch;
  const { kernel } = emu.launch, onTuned = EMULATED_TUNED.test(kernel);
  const geometry = `grid ${emu.launch.grid[0]} block ${emu.launch.block[0]} ` +
    (onTuned
      ? `tpr ${args[11]} nv ${args[12]} ${kernel.split("_")[2]}`
      : `tpr ${args[26]} nv ${args[27]} ${pathOf(args, c)}`);
  // The emulator's bytes, read through the same views on a third device.
  using rb = Device.open({ backend: "cpu" });
  const g = build(rb, c);
  const fakeBufs = [...new Set(emu.fake.all.map((t) => t.buffer))];
  const rbBufs = [...new Set(g.all.map((t) => t.buffer))];
  fakeBufs.forEach((fb, i) => rbBufs[i].hostBytes.set(emu.bytes.get(fb)!));
  const allocF32 = (t: Tensor | undefined): Float32Array | undefined =>
    t ? f32s(emu.bytes.get(t.buffer.ptr) ?? emu.bytes.get(t.buffer)!).subarray(0, g.rows) : undefined;
  const { kind, d } = c, rows = g.rows, dtype = c.dtype;

  // Bytes outside what the call writes: as they were (inputs entirely; y's and h's buffers outside their views).
  const eBufs = [...new Set(e.all.map((t) => t.buffer))];
  const writtenMask = new Map<number, Uint8Array>();
  for (const t of g.written) {
    const bi = rbBufs.indexOf(t.buffer);
    const m = writtenMask.get(bi) ?? new Uint8Array(t.buffer.byteLength);
    for (let r = 0; r < rows; r++) {
      const start = byteIndex(t, r, 0);
      m.fill(1, start, start + d * t.bytesPerElement);
    }
    writtenMask.set(bi, m);
  }
  rbBufs.forEach((b, bi) => {
    const got = b.hostBytes, want = inBytes[e.all.findIndex((t) => t.buffer === eBufs[bi])];
    if (g.scaleOut && b === g.scaleOut.buffer) return;
    const m = writtenMask.get(bi);
    let bad = 0, first = -1;
    for (let k = 0; k < got.length; k++) {
      if (m?.[k]) continue;
      if (got[k] !== want[k]) (bad++, first < 0 && (first = k));
    }
    if (bad) fail(`buffer ${bi}: ${bad} bytes outside the outputs changed (first at byte ${first})`);
  });

  // h: bitwise the CPU backend's.
  let hBytes: Uint8Array | undefined;
  if (e.hT) {
    const got = g.hT!.readSync();
    for (let i = 0; i < got.length; i++) {
      if (!Object.is(got[i], expH![i]) && !(Number.isNaN(got[i]) && Number.isNaN(expH![i]))) {
        fail(`h[${Math.floor(i / d)}, ${i % d}] = ${got[i]}, CPU ${expH![i]}`);
      }
    }
    hBytes = packRows(g.hT!, rows, d);
  }
  // mean, rstd.
  const close = (got: Float32Array | undefined, want: Float64Array, what: string) => {
    if (!got) return fail(`${what}: not returned`);
    for (let i = 0; i < rows; i++) {
      if ((Number.isNaN(want[i]) && Number.isNaN(got[i])) || got[i] === want[i]) continue; // NaN, or equal (±Inf)
      if (!(Math.abs(got[i] - want[i]) <= 1e-5 * (1 + Math.abs(want[i])))) {
        fail(`${what}[${i}] = ${got[i]}, reference ${want[i]}`);
      }
    }
  };
  const rstd = allocF32(emu.result.rstd), mean = kind === "layer" ? allocF32(emu.result.mean) : undefined;
  close(rstd, ref.rstd, "rstd");
  if (kind === "layer") close(mean, ref.mean, "mean");

  const got = g.y.readSync();
  let worst = 0;
  let scales: Float32Array | undefined;
  if (c.quant === "none") {
    for (let i = 0; i < got.length; i++) {
      const want = ref.y[i];
      if (Number.isNaN(want) && Number.isNaN(got[i])) continue;
      const tol = (dtype === "f32" ? 0 : ulpOf(want, dtype)) + 1e-5 * (1 + Math.abs(want));
      const err = Math.abs(got[i] - want) / tol;
      if (!(err <= 1)) fail(`y[${Math.floor(i / d)}, ${i % d}] = ${got[i]}, reference ${want} (tolerance ${tol})`);
      if (err > worst) worst = err;
    }
  } else {
    const qd = c.qdtype!;
    const staticScale = (kind === "layer" ? 0.02 : 0.01) * (qd === "int8" ? 1 : 0.1);
    if (c.quant === "dynamic") {
      const st = emu.result.scale!;
      scales = emu.bytes.has(st.buffer.ptr)
        ? allocF32(st)
        : g.all[e.all.indexOf(er.scale!)]?.readSync() ?? f32s(emu.bytes.get(st.buffer)!).subarray(0, rows);
    }
    const cpuQ = e.y.readSync(), biasHeld = e.bias?.readSync();
    for (let row = 0; row < rows; row++) {
      const q = quantizeRow(
        ref.y.subarray(row * d, (row + 1) * d),
        qd,
        c.quant === "dynamic" ? { scaleUpperBound: c.ub } : { scale: staticScale },
      );
      if (scales) {
        const s = scales[row];
        if (!(Math.abs(s - expScale![row]) <= 1e-5 * expScale![row])) {
          fail(`scale[${row}] = ${s}, CPU ${expScale![row]}`);
        }
      }
      for (let i = 0; i < d; i++) {
        const have = got[row * d + i];
        for (const [want, who] of [[q.q[i], "reference"], [cpuQ[row * d + i], "CPU"]] as const) {
          if (Number.isNaN(want)) {
            if (!Number.isNaN(have)) fail(`q[${row}, ${i}] = ${have}, ${who} NaN`);
            continue;
          }
          const err = quantError(have, want, ref.y[row * d + i], biasHeld?.[i] ?? 0, q.scale, qd);
          if (!(err <= 1)) fail(`q[${row}, ${i}] = ${have}, ${who} ${want} (${err} × tolerance)`);
          if (who === "reference" && err > worst) worst = err;
        }
      }
    }
  }
  return {
    name: n,
    kernel: emu.launch.kernel,
    geometry,
    worstY: worst,
    failures,
    yBytes: packRows(g.y, rows, d),
    hBytes,
    scales,
    mean,
    rstd,
  };
}

/** Which row loop nk_fused takes for these arguments (its `vp` condition, recomputed from the recorded launch). */
function pathOf(a: (bigint | number)[], c: Case): string {
  const ti = c.dtype === "f32" ? 4 : 2, to = c.quant === "none" ? ti : 1, vec = 16 / ti, ya = to === 1 ? vec : 16;
  const n0 = a[10] as number, n1 = a[11] as number, d = a[12] as number;
  const al = (p: bigint | number, s0: number, s1: number, size: number, k: number) =>
    p === 0n ||
    (BigInt(p) % BigInt(k) === 0n && (n0 <= 1 || (s0 * size) % k === 0) && (n1 <= 1 || (s1 * size) % k === 0));
  const a16 = (p: bigint | number) => BigInt(p) % 16n === 0n;
  const vp = d % vec === 0 && al(a[0], a[13] as number, a[14] as number, ti, 16) &&
    al(a[1], a[15] as number, a[16] as number, ti, 16) && al(a[2], a[17] as number, a[18] as number, ti, 16) &&
    al(a[3], a[19] as number, a[20] as number, to, ya) && a16(a[4]) && a16(a[6]) && (c.kind === "rms" || a16(a[5]));
  return vp ? "vec" : "scalar";
}

function packRows(t: Tensor, rows: number, d: number): Uint8Array {
  const bpe = t.bytesPerElement, out = new Uint8Array(rows * d * bpe), src = t.buffer.hostBytes;
  for (let r = 0; r < rows; r++) {
    const s = byteIndex(t, r, 0);
    out.set(src.subarray(s, s + d * bpe), r * d * bpe);
  }
  return out;
}

// ---------------------------------------------------------------- the grid
/** A case with no residual and no quantization unless `extra` says otherwise, so that a case reads as what it varies. */
const caseOf = (kind: Kind, dtype: FDType, d: number, rows: number, extra: Partial<Case> = {}): Case => ({
  kind,
  dtype,
  d,
  rows,
  residual: "none",
  quant: "none",
  ...extra,
});

function cases(): Case[] {
  const out: Case[] = [];
  const DS = quick ? [8, 769, 5120] : [8, 768, 769, 770, 5120, 5125, 8192, 8199];
  const kinds: Kind[] = ["rms", "layer"];
  const dtypes: FDType[] = ["f32", "f16", "bf16"];
  const qds: QuantDType[] = ["fp8e4m3", "fp8e5m2", "int8"];
  let k = 0;
  for (const kind of kinds) {
    for (const dtype of dtypes) {
      for (const d of DS) {
        const rows = d >= 5000 ? 7 : (k++ % 2 ? 33 : 7);
        const odd = d % 2 === 1;
        // float output: residual off / in place / to residualOut; strided x; weights of x's dtype for odd d.
        out.push(caseOf(kind, dtype, d, rows, { strided: rows === 7, paramsOfX: odd && dtype !== "f32" }));
        out.push(caseOf(kind, dtype, d, rows, { residual: "inplace", paramsOfX: !odd && dtype !== "f32" }));
        out.push(caseOf(kind, dtype, d, 7, { residual: "out", strided: true }));
        // quantized outputs: every 1-byte dtype, static by value and by tensor, dynamic (with and without a bound).
        for (const [qi, qdtype] of qds.entries()) {
          if (quick && qi !== (d % 3)) continue;
          out.push(
            caseOf(kind, dtype, d, 7, {
              residual: qi === 0 ? "inplace" : "none",
              quant: "static",
              qdtype,
              strided: qi === 1,
            }),
          );
          if (qi === (d % 3)) {
            out.push(
              caseOf(kind, dtype, d, 7, {
                residual: "out",
                quant: "static-tensor",
                qdtype,
                paramsOfX: dtype !== "f32",
              }),
            );
          }
          out.push(caseOf(kind, dtype, d, 7, {
            residual: qi === 2 ? "out" : "none",
            quant: "dynamic",
            qdtype,
            strided: qi === 0,
            paramsOfX: qi === 1 && dtype !== "f32",
            ub: qi === 2 ? 0.004 : undefined,
          }));
        }
      }
      // A long row: the block-per-row layout with many warps (f32: 640 threads for LN).
      out.push(caseOf(kind, dtype, 20000, 3, { residual: "inplace", quant: "dynamic", qdtype: "fp8e4m3" }));
      out.push(caseOf(kind, dtype, 20000, 3, { strided: true }));
      // Zero row, NaN row and a row with an infinite h, with dynamic quantization: lanes and block layouts on the scalar
      // path (770, 5125), a block per row on the vector path (5120).
      for (const d of [770, 5120, 5125]) {
        for (const qdtype of qds) {
          if (quick && qdtype !== "int8") continue;
          out.push(caseOf(kind, dtype, d, 7, { quant: "dynamic", qdtype, special: true }));
        }
      }
      // LayerNorm's rows whose first element (the shift) lies far from the mean, beside rows whose statistics need no
      // centred pass: a warp of several rows (d 128), the scalar path (770), a block per row (5120).
      if (kind === "layer") {
        for (const d of [128, 770, 5120]) {
          out.push(caseOf(kind, dtype, d, 33, { outlier: true, residual: d === 770 ? "out" : "none" }));
        }
      }
      // No weight / no bias.
      out.push(caseOf(kind, dtype, 768, 7, { noWeight: true, noBias: true }));
      if (kind === "layer") out.push(caseOf(kind, dtype, 769, 7, { quant: "dynamic", qdtype: "int8", noBias: true }));
    }
    // QK split over a [tokens, Hq + Hkv, headDim] view of a QKV buffer (V untouched).
    for (const dtype of dtypes) {
      out.push(caseOf(kind, dtype, 128, 0, { qk: { tokens: 5, hq: 8, hkv: 2 } }));
      if (quick) continue;
      out.push(caseOf(kind, dtype, 64, 0, { qk: { tokens: 3, hq: 4, hkv: 4 }, paramsOfX: dtype !== "f32" }));
      // headDim 66: the scalar path (66 is no multiple of the 16-byte chunk) on the 2-level view.
      out.push(caseOf(kind, dtype, 66, 0, { qk: { tokens: 4, hq: 6, hkv: 1 } }));
      // The 2-level x with a contiguous residual, h to residualOut and dynamic fp8 y.
      const qk = { tokens: 3, hq: 5, hkv: 2 };
      out.push(caseOf(kind, dtype, 128, 0, { residual: "out", quant: "dynamic", qdtype: "fp8e4m3", qk }));
      out.push(caseOf(kind, dtype, 128, 0, { residual: "inplace", quant: "static", qdtype: "int8", qk }));
    }
    // Plain calls without batchInvariant: the tuned plan's kernels on the emulated 4-SM device (`latency` up to 8 rows,
    // then the tile, `rows` and `block`), vector and masked paths; LayerNorm's outlier rows beside ordinary ones.
    const shapes = quick ? [[64, 33], [770, 7], [4096, 7], [1024, 33], [5125, 33]] : [
      [8, 300],
      [64, 33],
      [128, 300],
      [770, 7],
      [4096, 7],
      [1024, 33],
      [2048, 33],
      [5125, 33],
      [8192, 33],
    ];
    for (const dtype of dtypes) {
      for (const [d, rows] of shapes) {
        out.push(caseOf(kind, dtype, d, rows, { tuned: true, outlier: kind === "layer" && rows === 33 }));
        if (!quick && d === 1024) out.push(caseOf(kind, dtype, d, rows, { tuned: true, strided: true }));
      }
    }
  }
  return filter ? out.filter((c) => name(c).includes(filter)) : out;
}

/** Batch invariance: rows 0..6 of a 33-row launch, the 7-row launch of the same rows, and rows 0, 5, 32 alone. */
function invarianceSets(): Case[] {
  const list = quick
    ? [
      caseOf("rms", "bf16", 770, 33, { residual: "out" }),
      caseOf("layer", "f32", 5125, 33, { quant: "dynamic", qdtype: "fp8e4m3" }),
      caseOf("rms", "bf16", 4096, 33, { residual: "out", quant: "dynamic", qdtype: "fp8e4m3" }),
    ]
    : [
      caseOf("rms", "bf16", 770, 33, { residual: "out" }),
      caseOf("layer", "f16", 768, 33, { quant: "dynamic", qdtype: "fp8e4m3", residual: "inplace" }),
      caseOf("layer", "f32", 5125, 33, { quant: "dynamic", qdtype: "int8" }),
      caseOf("rms", "f32", 8192, 33, { residual: "inplace" }),
      caseOf("layer", "bf16", 8199, 33, { residual: "out", paramsOfX: true }),
      caseOf("rms", "f32", 20000, 5, { strided: true }),
      caseOf("rms", "bf16", 4096, 33, { residual: "out", quant: "dynamic", qdtype: "fp8e4m3" }),
      // Quantized LayerNorm on _nv4 with weights of x's dtype, blocks taking several rows at grids 1 to 3.
      caseOf("layer", "bf16", 4096, 33, { residual: "out", quant: "dynamic", qdtype: "fp8e4m3", paramsOfX: true }),
    ];
  // LayerNorm with the centred pass on odd rows alone: sub-warp rows sharing a warp, and a block per row.
  list.push(caseOf("layer", "bf16", 128, 33, { outlier: true, quant: "dynamic", qdtype: "fp8e4m3" }));
  if (!quick) list.push(caseOf("layer", "f16", 5120, 33, { outlier: true, residual: "out" }));
  // Plain norms (batchInvariant alone) on the invariant tuned plan, LayerNorm with its odd rows far from their mean:
  // the two-pass `rows` kernel (512: 8 lanes a row), the one-pass `rows` of a warp a row (2048), `block` (4096; 770:
  // the masked path); RMSNorm's `block`.
  list.push(caseOf("layer", "bf16", 512, 33, { outlier: true }), caseOf("layer", "f16", 2048, 33, { outlier: true }));
  list.push(caseOf("rms", "bf16", 4096, 33));
  if (!quick) list.push(caseOf("layer", "bf16", 4096, 33, { outlier: true }), caseOf("layer", "f32", 770, 33));
  // Short rows past one wave of the emulated device (300 × 16 chunks > 4 SMs × 1024 lanes): the full launch takes 4
  // chunks a lane (fused.short), its sub-launches a chunk a lane (fused.wave, fused.latency).
  list.push(caseOf("rms", "bf16", 128, 300, { residual: "out", quant: "dynamic", qdtype: "fp8e4m3" }));
  // Two-level rows (QK split over a head view), sub-warp and block-per-row splits, vector and scalar paths, with
  // fewer blocks: 130 rows of 16 chunks at a chunk a lane (fused.wave, 16 rows a block: library grid 9); 280 rows of
  // headDim 66 at 4 chunks a lane (fused.short, scalar path); headDim 2050 (scalar path), a block per row, 20 rows.
  list.push(caseOf("rms", "bf16", 128, 0, { qk: { tokens: 13, hq: 8, hkv: 2 } }));
  list.push(
    caseOf("layer", "f16", 66, 0, {
      qk: { tokens: 40, hq: 6, hkv: 1 },
      residual: "out",
      quant: "dynamic",
      qdtype: "int8",
    }),
  );
  list.push(
    caseOf("layer", "f16", 2050, 0, {
      qk: { tokens: 4, hq: 3, hkv: 2 },
      residual: "out",
      quant: "dynamic",
      qdtype: "fp8e5m2",
    }),
  );
  return filter ? list.filter((c) => name(c).includes(filter)) : list;
}

// ---------------------------------------------------------------- the backward's dResidual add (nk_fused_add_*)
// On a GPU a backward with dResidual runs the backward kernels, then nk_fused_add_* over dx. The emulator runs that add
// over the CPU backend's unfused dx (the same inputs, the same layout); its bytes must be the CPU backend's fused dx,
// bit for bit, padding included: the CPU backend rounds as the kernels do.
interface AddCase {
  kind: Kind;
  dtype: FDType;
  rows: number;
  d: number;
  strided: boolean;
}
const addName = (c: AddCase) =>
  `backward ${c.kind} ${c.dtype} d=${c.d} rows=${c.rows}${c.strided ? " strided" : ""} +dResidual`;

async function runAddCase(c: AddCase): Promise<string[]> {
  // Strided: dx's rows d + 3 apart, dResidual's d + 7 (the add's two strides told apart), and dx's padding poisoned:
  // the add must leave it as it is.
  const { kind, dtype, rows, d } = c, rowStride = c.strided ? d + 3 : d, dResStride = c.strided ? d + 7 : d;
  const inputs = (dev: Device) => {
    const t = (seed: number, lo = -1, hi = 1, stride = rowStride) => {
      const v = dev.empty([rows, d], { dtype, rowStride: stride });
      v.write(randoms(rows * d, seed, lo, hi));
      return v;
    };
    const dx = dev.empty([rows, d], { dtype, rowStride });
    dx.buffer.hostBytes.fill(0x5a);
    // dResidual of the norm's dx's magnitude: sums that cancel, where rounding the norm's dx first shows.
    return { h: t(1), dy: t(2), dRes: t(3, -3, 3, dResStride), dx };
  };
  const backward = (m: ReturnType<typeof inputs>, rstd: Tensor, mean: Tensor | undefined, dResidual?: Tensor) =>
    kind === "rms"
      ? rmsNormBackward(m.dy, m.h, { rstd, dx: m.dx, ...(dResidual ? { dResidual } : {}) })
      : layerNormBackward(m.dy, m.h, { mean: mean!, rstd, dx: m.dx, ...(dResidual ? { dResidual } : {}) });

  // The CPU backend: the statistics, the unfused dx (the add's input) and the fused dx (the expected bytes).
  using cpu = Device.open({ backend: "cpu" });
  const unfused = inputs(cpu), fused = inputs(cpu);
  using stats = kind === "rms" ? rmsNorm(unfused.h, { stats: true }) : layerNorm(unfused.h, { stats: true });
  backward(unfused, stats.rstd, stats.mean);
  backward(fused, stats.rstd, stats.mean, fused.dRes);

  // The fake device: the launches the library makes, the add's arguments recorded.
  trackBuffers = [];
  let made!: ReturnType<typeof inputs> & { rstd: Tensor; mean: Tensor };
  const f = await fakeCudaDevice(
    (dev) => (made = { ...inputs(dev), rstd: dev.empty([rows]), mean: dev.empty([rows]) }),
    {
      record: true,
      load: false,
      info: EMU_DEVICE,
      snapshot: (p, k) => (k.startsWith("nk_fused_add_") ? readParams(p, FUSED_ADD_ARGS) : undefined),
    },
  );
  using _dev = f.dev;
  (f.driver as unknown as Record<string, unknown>).occupancy = () => 4; // one-row blocks size their grid from it
  await loadKernels(f.dev, { quant: true, backward: true });
  backward(made, made.rstd, made.mean, made.dRes);
  const adds = f.launches.filter((l) => l.kernel.startsWith("nk_fused_add_"));
  if (adds.length !== 1 || f.launches[f.launches.length - 1] !== adds[0]) {
    throw new Error(`${addName(c)}: expected one nk_fused_add_* launch, last; got ${f.launches.map((l) => l.kernel)}`);
  }
  const l = adds[0], args = l.args as (bigint | number)[];
  if (l.kernel !== `nk_fused_add_${dtype}`) throw new Error(`${addName(c)}: kernel ${l.kernel}`);
  const dir = `${WORK}/case${caseNo++}`;
  mkdirSync(dir, { recursive: true });
  const lines = [`kernel ${l.kernel}`, `grid ${l.grid[0]}`, `block ${l.block[0]}`];
  // The fake's dx and dResidual buffers, holding the CPU backend's unfused dx and its dResidual (the same layout).
  const pairs: [Tensor, Tensor][] = [[made.dx, unfused.dx], [made.dRes, unfused.dRes]];
  pairs.forEach(([fake, real], i) => {
    writeFileSync(`${dir}/in${i}`, real.buffer.hostBytes);
    lines.push(`buffer ${fake.buffer.ptr} ${fake.buffer.byteLength} ${dir}/in${i} ${dir}/out${i}`);
  });
  FUSED_ADD_ARGS.forEach((t, i) => lines.push(manifestArg(t, args[i])));
  writeFileSync(`${dir}/manifest`, lines.join("\n") + "\n");
  execFileSync(BIN, [`${dir}/manifest`], { stdio: ["ignore", "inherit", "inherit"] });
  const got = new Uint8Array(readFileSync(`${dir}/out0`)), want = fused.dx.buffer.hostBytes;
  const dresAfter = new Uint8Array(readFileSync(`${dir}/out1`));
  if (!keep) rmSync(dir, { recursive: true, force: true });
  trackBuffers = undefined;
  const failures: string[] = [];
  const firstDiff = got.findIndex((v, i) => v !== want[i]);
  if (got.length !== want.length || firstDiff >= 0) {
    failures.push(`dx differs from the CPU backend's at byte ${firstDiff} of ${want.length}`);
  }
  if (dresAfter.some((v, i) => v !== unfused.dRes.buffer.hostBytes[i])) failures.push("dResidual was written");
  // 16-bit: the case must tell the two roundings apart (some element where the float64 dx + dResidual, rounded once,
  // differs from the fused dx), or it would pass a kernel that rounded once.
  if (dtype !== "f32") {
    const ref = normBackward({
      kind,
      rows,
      d,
      x: unfused.h.readSync(),
      xStride: d,
      dy: unfused.dy.readSync(),
      dyStride: d,
      rstd: stats.rstd.readSync(),
      ...(kind === "layer" ? { mean: stats.mean!.readSync() } : {}),
    });
    const add = unfused.dRes.readSync(), fx = fused.dx.readSync();
    using once = cpu.tensor(Array.from(ref.dx, (v, i) => v + add[i]), [rows, d], { dtype });
    if (once.readSync().every((v, i) => v === fx[i])) failures.push("one rounding gives the same dx: no test");
  }
  return failures;
}

function addCases(): AddCase[] {
  const out: AddCase[] = [];
  for (const kind of ["rms", "layer"] as const) {
    for (const dtype of ["f32", "f16", "bf16"] as const) {
      for (const [d, strided] of [[768, false], [769, true], [5120, false]] as const) {
        out.push({ kind, dtype, rows: quick ? 3 : 7, d, strided });
      }
    }
  }
  return out.filter((c) => !filter || addName(c).includes(filter));
}

// ---------------------------------------------------------------- main
mkdirSync(WORK, { recursive: true });
console.log("building the emulator...");
execFileSync(`${HERE}build.sh`, [WORK, ...(sanitize ? [`-fsanitize=${sanitize}`, "-g", "-O1"] : [])], {
  stdio: ["ignore", "ignore", "inherit"],
});
if (argv.includes("--self-test")) {
  // The checks themselves: an altered output must be reported.
  const tests: Case[] = [];
  for (const q of ["none", "fp8e4m3", "fp8e5m2", "int8"] as const) {
    for (const dtype of ["f32", "f16", "bf16"] as const) {
      tests.push({
        kind: "layer",
        dtype,
        d: 770,
        rows: 7,
        residual: "none",
        corrupt: "y",
        ...(q === "none" ? { quant: "none" } : { quant: "dynamic", qdtype: q }),
      });
    }
  }
  tests.push({ kind: "rms", dtype: "bf16", d: 5120, rows: 7, residual: "out", quant: "none", corrupt: "h" });
  tests.push({ kind: "rms", dtype: "f16", d: 768, rows: 7, residual: "inplace", quant: "none", corrupt: "h" });
  tests.push({
    kind: "layer",
    dtype: "f32",
    d: 769,
    rows: 7,
    residual: "none",
    quant: "none",
    strided: true,
    corrupt: "pad",
  });
  tests.push({
    kind: "layer",
    dtype: "bf16",
    d: 768,
    rows: 7,
    residual: "none",
    quant: "dynamic",
    qdtype: "int8",
    corrupt: "scale",
  });
  let caught = 0;
  for (const c of tests) {
    const o = await runCase(c);
    if (o.failures.length) caught++;
    console.log(`${o.failures.length ? "caught " : "MISSED "} ${o.name}: ${o.failures[0] ?? "no failure reported"}`);
  }
  console.log(`self-test: ${caught} of ${tests.length} alterations caught`);
  Deno.exit(caught === tests.length ? 0 : 1);
}
const t0 = performance.now();
let failed = 0, thrown = 0, ran = 0, tuned = 0, worstAll = 0, worstName = "";
const worstBy = new Map<string, number>();
for (const c of cases()) {
  const t = performance.now();
  let o: Outcome;
  try {
    o = await runCase(c);
  } catch (err) {
    if (err instanceof TunedLaunch) {
      tuned++;
      console.log(`skip ${name(c)}: ${err.message}, which the emulator does not run`);
      continue;
    }
    failed++, thrown++;
    console.log(`FAIL ${name(c)}: ${(err as Error).message}`);
    if (Deno.env.get("EMU_DEBUG")) console.log((err as Error).stack);
    continue;
  }
  ran++;
  const key = `${c.quant === "none" ? c.dtype : c.qdtype}`;
  worstBy.set(key, Math.max(worstBy.get(key) ?? 0, o.worstY));
  if (o.worstY > worstAll) (worstAll = o.worstY, worstName = o.name);
  const ms = (performance.now() - t).toFixed(0);
  if (o.failures.length) {
    failed++;
    console.log(`FAIL ${o.name} (${o.kernel}, ${o.geometry}):\n  ${o.failures.join("\n  ")}`);
  } else {
    console.log(`ok   ${o.name}  ${o.kernel} ${o.geometry}  worst ${o.worstY.toFixed(3)}  ${ms} ms`);
  }
}
// The backward's dResidual add.
for (const c of addCases()) {
  ran++;
  let failures: string[];
  try {
    failures = await runAddCase(c);
  } catch (err) {
    failures = [(err as Error).message];
  }
  if (failures.length) (failed++, console.log(`FAIL ${addName(c)}:\n  ${failures.join("\n  ")}`));
  else console.log(`ok   ${addName(c)}  nk_fused_add_${c.dtype}  bitwise the CPU backend's dx`);
}
// Batch invariance.
let invFailed = 0, invTotal = 0;
for (const c of invarianceSets()) {
  invTotal++;
  const runs: { label: string; first: number; o: Outcome }[] = [];
  try {
    runs.push({ label: "library grid", first: 0, o: await runCase(c) });
    if (!c.qk) {
      // Sub-launches of the rows (those that fit: 33 rows, or the few long ones).
      const subs: [string, number, number][] = [
        ["7 rows", 0, 7],
        ["rows 13..19", 13, 7],
        ["row 0", 0, 1],
        ["row 5", 5, 1],
        ["row 32", 32, 1],
        ["rows 1..2", 1, 2],
        ["row 4", 4, 1],
      ];
      for (const [label, first, count] of subs) {
        if (
          first + count > c.rows || (c.rows === 33 && label.startsWith("rows 1.")) ||
          (c.rows === 33 && label === "row 4")
        ) continue;
        runs.push({ label, first, o: await runCase({ ...c, sub: { first, count } }) });
      }
      // Every row also in launches of at most EMU_DEVICE.multiprocessors rows: the latency split (fused.latency) for
      // each row the bandwidth split computed in the full launch.
      if (c.rows === 33) {
        const per = EMU_DEVICE.multiprocessors;
        for (let first = 0; first < c.rows; first += per) {
          const count = Math.min(per, c.rows - first);
          runs.push({ label: `rows ${first}+${count}`, first, o: await runCase({ ...c, sub: { first, count } }) });
        }
      }
    }
    // Fewer blocks than the library launches: the grid-stride loop (two-level (i0, i1) stepping) takes over.
    for (const grid of [1, 2, 3]) runs.push({ label: `grid ${grid}`, first: 0, o: await runCase({ ...c, grid }) });
  } catch (err) {
    invFailed++;
    console.log(`FAIL invariance ${name(c)}: ${(err as Error).message}`);
    continue;
  }
  const all = runs[0].o, problems: string[] = [];
  for (const r of runs) if (r.o.failures.length) problems.push(`${r.label}: ${r.o.failures[0]}`);
  const nAll = all.scales?.length ?? (c.qk ? c.qk.tokens * (c.qk.hq + c.qk.hkv) : c.rows);
  const rowBytes = all.yBytes.length / nAll, hRow = all.hBytes ? all.hBytes.length / nAll : 0;
  for (const r of runs.slice(1)) {
    const n = r.o.yBytes.length / rowBytes;
    const same = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((v, i) => v === b[i]);
    if (!same(r.o.yBytes, all.yBytes.subarray(r.first * rowBytes, (r.first + n) * rowBytes))) {
      problems.push(`${r.label}: y differs from the 33-row launch`);
    }
    if (hRow && !same(r.o.hBytes!, all.hBytes!.subarray(r.first * hRow, (r.first + n) * hRow))) {
      problems.push(`${r.label}: h differs`);
    }
    // Scales and statistics bit for bit (Object.is tells −0 from +0; NaN payloads are compared as bits).
    const bits = (a: Float32Array) => new Uint32Array(a.buffer, a.byteOffset, a.length);
    for (const k of ["scales", "mean", "rstd"] as const) {
      const want = all[k], got = r.o[k];
      if (!want) continue;
      const w = bits(want), g = got ? bits(got) : undefined;
      for (let i = 0; i < n; i++) if (g?.[i] !== w[r.first + i]) problems.push(`${r.label}: ${k}[${i}] differs`);
    }
  }
  const geos = [...new Set(runs.map((r) => r.o.geometry))].join(" | ");
  if (problems.length) {
    invFailed++;
    console.log(`FAIL invariance ${name(c)}:\n  ${problems.slice(0, 8).join("\n  ")}`);
  } else console.log(`ok   invariance ${name(c)}: ${runs.map((r) => r.label).join(" / ")} bitwise equal (${geos})`);
}
const secs = ((performance.now() - t0) / 1000).toFixed(0);
console.log(
  `\n${ran + thrown + tuned} cases: ${ran + thrown - failed} passed, ${failed} failed, ${tuned} skipped ` +
    `(tuned kernels the emulator lacks); invariance sets: ${invTotal - invFailed} of ${invTotal} ` +
    `passed; ${secs} s`,
);
console.log(`largest error / tolerance: ${worstAll.toFixed(3)} (${worstName})`);
console.log(`by output dtype: ${[...worstBy].map(([k, v]) => `${k} ${v.toFixed(3)}`).join(", ")}`);
Deno.exit(failed || invFailed ? 1 : 0);
