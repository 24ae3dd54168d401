/** The fused kernels' plan (ops/plan_fused.ts): the reduction tree from (kind, D, dtype) alone, its split, launch, kernels. */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  FUSED_FEW_THREADS,
  FUSED_KERNELS,
  FUSED_LATENCY_THREADS,
  FUSED_MAX_THREADS,
  FUSED_MAXV,
  FUSED_ROWS_BLOCK,
  FUSED_SM_THREADS,
  FUSED_SPLITS,
  FUSED_TRIPLES,
  FUSED_VARIANTS,
  type FusedGeometry,
  fusedGeometry,
  fusedKernelFor,
  fusedKernelName,
  fusedLaunch,
  type FusedPlace,
  fusedTree,
} from "../../ops/plan_fused.ts";
import type { PlanLimits } from "../../ops/plan.ts";
import { dtypeBytes, DTYPES } from "../../runtime/dtype.ts";
import { AUDIT_DS, probeRows } from "../../scripts/batch_invariance_audit.ts";

const H200: PlanLimits = {
  maxGridX: 2 ** 31 - 1,
  maxThreadsPerBlock: 1024,
  warpSize: 32,
  ccMajor: 9,
  multiprocessors: 132,
};
const KINDS = ["layer", "rms"] as const;

function geometry(
  kind: "layer" | "rms",
  d: number,
  dtype: string,
  rows: number,
  limits = H200,
  place: FusedPlace = "cuda",
): FusedGeometry {
  const g = fusedGeometry(kind, d, dtype, limits, rows, place);
  assert.ok(!("unsupported" in g), `D=${d} ${dtype}: ${JSON.stringify(g)}`);
  return g;
}
/** Every D to 70000 in steps that hit each chunk count near the layout edges, and the audit's D values. */
const SWEEP_DS = [
  ...new Set([...AUDIT_DS, ...Array.from({ length: 2100 }, (_, i) => 1 + i), 2047, 2048, 2049, 16383, 16384]),
]
  .concat(Array.from({ length: 700 }, (_, i) => 2100 + i * 97))
  .sort((a, b) => a - b);

test("the tree takes no row count; the split follows it: latency up to one row per SM, bandwidth above", () => {
  const rows = probeRows(H200);
  for (const kind of KINDS) {
    for (const dtype of DTYPES) {
      for (const d of AUDIT_DS) {
        if ("unsupported" in fusedTree(kind, d, dtype, H200)) continue;
        // The leaves from D and the dtype alone: 16-byte chunks padded to a power of two.
        const chunks = Math.ceil(d / (16 / dtypeBytes(dtype))), leaves = 2 ** Math.ceil(Math.log2(chunks));
        assert.deepEqual(fusedTree(kind, d, dtype, H200), { leaves, chunks });
        for (const r of rows) {
          const g = geometry(kind, d, dtype, r), at = `${kind} ${dtype} D=${d} rows=${r}`;
          assert.equal(g.tpr * g.nv, leaves, `${at}: a split of the same tree`);
          assert.equal(g.rule === "fused.latency", r <= H200.multiprocessors, at);
          const l = fusedLaunch(g, r, H200);
          assert.deepEqual(l.block, [g.block, 1, 1], at);
          assert.equal(l.grid[0], Math.ceil(r / g.rowsPerBlock), at);
        }
      }
    }
  }
});

test("small blocks: no sub-warp rows below 256 threads; a block of whole warps holds at least the leaves", () => {
  for (const limits of [{ ...H200, maxThreadsPerBlock: 128 }, { ...H200, maxThreadsPerBlock: 192, warpSize: 64 }]) {
    for (const d of [8, 64, 256, 1000, 4096]) {
      for (const rows of [1, 100_000]) {
        const g = geometry("rms", d, "bf16", rows, limits), at = `${JSON.stringify(limits)} D=${d} rows=${rows}`;
        const leaves = 2 ** Math.ceil(Math.log2(Math.ceil(d / 8)));
        assert.equal(g.leaves, leaves, at);
        assert.ok(g.tpr * g.nv >= leaves && g.nv <= FUSED_MAXV, at);
        assert.equal(g.tpr & (g.tpr - 1), 0, at);
        assert.deepEqual([g.block, g.rowsPerBlock], [g.tpr, 1], at);
        assert.ok(g.block <= limits.maxThreadsPerBlock && g.block % limits.warpSize === 0, at);
      }
    }
    assert.ok(
      "unsupported" in fusedGeometry("rms", 16384, "bf16", limits, 1, "cuda"),
      "past the block's threads × 8 chunks",
    );
  }
});

test("the grid covers the rows, rowsPerBlock at a time, and stops at the device's grid limit", () => {
  const g = geometry("rms", 768, "bf16", 1000); // 96 chunks, 128 leaves: 32 lanes × 4, 8 rows per block
  assert.deepEqual([g.tpr, g.nv, g.leaves, g.block, g.rowsPerBlock, g.rule], [32, 4, 128, 256, 8, "fused.few"]);
  for (const [rows, grid] of [[1, 1], [8, 1], [9, 2], [16, 2], [17, 3], [1_000_000, 125_000]]) {
    assert.equal(fusedLaunch(g, rows, H200).grid[0], grid, `rows=${rows}`);
  }
  assert.equal(fusedLaunch(g, 1_000_000, { maxGridX: 1000 }).grid[0], 1000);
  assert.equal(fusedLaunch(g, 0, H200).grid[0], 0, "no rows: nothing to launch");
  const b = geometry("layer", 8192, "bf16", 300); // 1024 chunks: a block of 256 threads per row, 4 chunks each
  assert.deepEqual([b.tpr, b.nv, b.block, b.rowsPerBlock, b.rule], [256, 4, 256, 1, "fused.few"]);
  assert.equal(fusedLaunch(b, 300, H200).grid[0], 300);
  const one = geometry("layer", 8192, "bf16", 1); // one row: 256 threads of 4 chunks
  assert.deepEqual([one.tpr, one.nv, one.block, one.rowsPerBlock, one.rule], [256, 4, 256, 1, "fused.latency"]);
});

test("every geometry fits the kernel: powers of two holding the row, nv ≤ 8, at most 1024 threads", () => {
  for (const kind of KINDS) {
    for (const dtype of DTYPES) {
      const vec = 16 / dtypeBytes(dtype), maxD = FUSED_MAX_THREADS * FUSED_MAXV * vec;
      for (const d of SWEEP_DS.filter((d) => d <= maxD)) {
        const chunks = Math.ceil(d / vec), leaves = 2 ** Math.ceil(Math.log2(chunks));
        for (const [rows, place] of [1, 132, 133, 100_000].flatMap((r) => [[r, "cuda"], [r, "hip"]] as const)) {
          const g = geometry(kind, d, dtype, rows, H200, place), at = `${kind} ${dtype} D=${d} rows=${rows} ${place}`;
          assert.equal(g.leaves, leaves, at);
          assert.ok(g.nv >= 1 && g.nv <= FUSED_MAXV, at);
          assert.equal(g.tpr & (g.tpr - 1), 0, `${at}: tpr a power of two`);
          assert.equal(g.nv & (g.nv - 1), 0, `${at}: nv a power of two`);
          assert.equal(g.tpr * g.nv, leaves, `${at}: the split holds exactly the tree's leaves`);
          assert.ok(g.block <= FUSED_MAX_THREADS, at);
          if (g.tpr <= 32) {
            assert.deepEqual([g.block, g.rowsPerBlock * g.tpr], [FUSED_ROWS_BLOCK, FUSED_ROWS_BLOCK], at);
          } else assert.deepEqual([g.block, g.rowsPerBlock], [g.tpr, 1], at);
          if (g.rule === "fused.latency") {
            const nv = Math.min(FUSED_MAXV, Math.max(1, leaves / FUSED_LATENCY_THREADS));
            assert.equal(g.nv, nv, `${at}: latency split`);
          } else if (g.rule === "fused.wave") assert.equal(g.nv, 1, `${at}: a chunk a lane`);
          else if (g.rule === "fused.short") assert.equal(g.nv, Math.min(4, leaves), `${at}: 4 chunks a lane`);
          else if (g.rule === "fused.few") {
            assert.equal(g.nv, 4, `${at}: 4 chunks a thread`);
            assert.equal(place, "cuda", `${at}: only where the _nv4 kernels are`);
            assert.ok(leaves > 32 && leaves <= FUSED_FEW_THREADS * 4, at);
          } else assert.equal(g.nv, Math.min(8, leaves), `${at}: bandwidth split`);
        }
      }
    }
  }
});

/**
 * The kernel's sum of one row (kernels/fused.cuh, nk_fused_red and nk_fused_fold8) in f32, for a split (tpr, nv) of its
 * chunks' partial sums `leaf[c]` (c < leaves, +0 past the row), on a device of `warp` lanes: each thread folds its 8
 * slots (c = t + i·tpr) in the bit-reversed order with leaf + 0, then threads t and t + h are added for h = tpr/2 …
 * warp (shared memory), then the xor butterfly over lanes warp/2 … 1, the lower lane's sum first. `slotOrder`: each
 * thread adds its slots in order instead (the control). Returns the f32 bits.
 */
function kernelSum(leaf: Float32Array, tpr: number, nv: number, warp = 32, slotOrder = false): number {
  const f = Math.fround, add = (a: number, b: number) => f(a + b);
  const vals = new Float32Array(tpr);
  for (let t = 0; t < tpr; t++) {
    if (slotOrder) {
      for (let s = 0; s < nv; s++) vals[t] = add(vals[t], t + s * tpr < leaf.length ? leaf[t + s * tpr] : 0);
      continue;
    }
    const st: number[] = [];
    for (let q = 0; q < 8; q++) {
      const s = ((q & 1) << 2) | (q & 2) | ((q >> 2) & 1), c = t + s * tpr;
      let v = add(s < nv && c < leaf.length ? leaf[c] : 0, 0);
      for (let k = q + 1; (k & 1) === 0; k >>= 1) v = add(st.pop()!, v);
      st.push(v);
    }
    vals[t] = st[0];
  }
  if (tpr > warp) {
    for (let h = tpr / 2; h >= warp; h /= 2) for (let t = 0; t < h; t++) vals[t] = add(vals[t], vals[t + h]);
  }
  let lanes = Array.from(vals.subarray(0, Math.min(tpr, warp)));
  for (let m = warp / 2; m > 0; m >>= 1) {
    if (m >= lanes.length) continue;
    lanes = lanes.map((v, l) => (l & m ? add(lanes[l ^ m], v) : add(v, lanes[l ^ m])));
  }
  return new Uint32Array(Float32Array.of(lanes[0]).buffer)[0];
}

test("every split of a row's leaves adds them in the same tree: the same f32 bits (a model of the kernel)", () => {
  let seed = 7;
  const rand = () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32) * 2 - 1;
  const rows: [string, (chunks: number) => Float32Array][] = [
    // Partial sums of mixed sign over 23 binades (rounding differs between orders), zeros of both signs among them.
    [
      "random",
      (n) =>
        Float32Array.from({ length: n }, (_, i) => (i % 17 === 3 ? (i % 2 ? -0 : 0) : rand() * 2 ** (i % 23) + 1 / 3)),
    ],
    // Sums of zero: −0 leaves (a chunk of −0 about a +0 shift), and pairs that cancel.
    ["zeros", (n) => Float32Array.from({ length: n }, (_, i) => (i % 3 ? -0 : 0))],
    ["all −0", (n) => new Float32Array(n).fill(-0)],
    ["cancelling", (n) => Float32Array.from({ length: n }, (_, i) => (i % 2 ? -1 : 1) * 2 ** (i % 7))],
  ];
  for (const [what, make] of rows) {
    for (const chunks of [1, 3, 8, 31, 96, 97, 256, 640, 1000, 1024, 4099, 8192]) {
      const leaves = 2 ** Math.ceil(Math.log2(chunks)), leaf = make(chunks);
      const sums = new Set<number>();
      for (const warp of [32, 64]) {
        for (const nv of [1, 2, 4, 8]) {
          const tpr = leaves / nv;
          if (tpr < 1 || tpr > 1024 || !Number.isInteger(tpr)) continue;
          sums.add(kernelSum(leaf, tpr, nv, warp));
          if (tpr <= 512) sums.add(kernelSum(leaf, tpr * 2, nv, warp)); // a block's spare threads (zero leaves)
        }
      }
      assert.equal(sums.size, 1, `${what}, ${chunks} chunks: bits ${[...sums].map((b) => b.toString(16)).join(", ")}`);
      if (what !== "random") {
        // Exact sums (small integers and zeros): the value itself, and +0 (bits 0), never −0, where it is zero.
        const exact = leaf.reduce((a, v) => a + v, 0);
        assert.equal([...sums][0], new Uint32Array(Float32Array.of(exact).buffer)[0], `${what}, ${chunks} chunks`);
      }
      if (what === "random" && chunks === 1000) {
        // The control: each thread adding its slots in slot order (no tree) differs between splits on these data.
        const inOrder = new Set([1, 2, 4, 8].map((nv) => kernelSum(leaf, leaves / nv, nv, 32, true)));
        assert.ok(inOrder.size > 1, "the data tell orders apart");
      }
    }
  }
});

test("the split table: ids in order, each with its reason", () => {
  assert.deepEqual(FUSED_SPLITS.map((r) => r.id), [
    "fused.latency",
    "fused.wave",
    "fused.short",
    "fused.padded",
    "fused.few",
    "fused.block",
  ]);
  for (const r of FUSED_SPLITS) assert.ok(r.why.length > 20);
  const lanes = geometry("rms", 512, "bf16", 1000); // 64 chunks: 16 lanes × 4, 16 rows a block
  assert.deepEqual([lanes.tpr, lanes.nv, lanes.block, lanes.rowsPerBlock, lanes.rule], [16, 4, 256, 16, "fused.few"]);
  const d2048 = geometry("rms", 2048, "bf16", 1000); // 256 chunks: a block of 64 threads × 4
  assert.deepEqual([d2048.tpr, d2048.nv, d2048.block, d2048.rowsPerBlock, d2048.rule], [64, 4, 64, 1, "fused.few"]);
  const few = geometry("layer", 2056, "bf16", 1000); // 257 chunks, 512 leaves: 128 threads × 4
  assert.deepEqual([few.tpr, few.nv, few.block, few.rule], [128, 4, 128, "fused.few"]);
  const padded = geometry("rms", 2056, "bf16", 1000); // RMSNorm, at most 5/8 of the leaves: 64 threads × 8
  assert.deepEqual([padded.tpr, padded.nv, padded.block, padded.rule], [64, 8, 64, "fused.padded"]);
  const most = geometry("rms", 8192, "bf16", 1000); // 1024 chunks: 256 threads × 4, the _nv4 kernels' block
  assert.deepEqual([most.tpr, most.nv, most.rule], [256, 4, "fused.few"]);
  const block = geometry("rms", 8200, "bf16", 1000); // 1025 chunks, 2048 leaves: 256 threads × 8
  assert.deepEqual([block.tpr, block.nv, block.block, block.rule], [256, 8, 256, "fused.block"]);
  assert.deepEqual([geometry("rms", 4096, "f32", 1000).tpr, geometry("rms", 4096, "f32", 1000).rule], [
    256,
    "fused.few",
  ]);
  assert.equal(geometry("layer", 1024, "f32", 1000).tpr, 64); // 256 chunks: 64 threads × 4
  assert.deepEqual([geometry("rms", 2048, "bf16", 1).tpr, geometry("rms", 2048, "bf16", 1).nv], [256, 1]);
});

test("4 chunks a thread at many rows only where the _nv4 kernels are (CUDA); 8 on HIP and the CPU", () => {
  for (
    const [d, cuda, other] of [[512, [16, 4], [8, 8]], [2048, [64, 4], [32, 8]], [8192, [256, 4], [128, 8]]] as const
  ) {
    const g = geometry("rms", d, "bf16", 100_000, H200, "cuda");
    assert.deepEqual([g.tpr, g.nv, g.rule], [...cuda, "fused.few"], `D ${d} cuda`);
    for (const place of ["hip", "cpu"] as const) {
      const h = geometry("rms", d, "bf16", 100_000, H200, place);
      assert.deepEqual([h.tpr, h.nv, h.rule], [...other, "fused.block"], `D ${d} ${place}`);
      assert.equal(h.leaves, g.leaves, "the same tree");
    }
  }
  // Decode and short rows take the same split everywhere.
  for (const [d, rows] of [[4096, 1], [128, 320], [128, 1_000_000]] as const) {
    const [c, h] = (["cuda", "hip"] as const).map((p) => geometry("rms", d, "bf16", rows, H200, p));
    assert.deepEqual([c.tpr, c.nv, c.rule], [h.tpr, h.nv, h.rule], `D ${d} rows ${rows}`);
  }
});

test("RMSNorm rows filling at most 5/8 of their tree take 8 chunks at many rows on CUDA (fused.padded)", () => {
  const split = (kind: "layer" | "rms", d: number, dtype = "bf16", rows = 100_000, place: FusedPlace = "cuda") => {
    const g = geometry(kind, d, dtype, rows, H200, place);
    return [g.tpr, g.nv, g.rule];
  };
  assert.deepEqual(split("rms", 5120), [128, 8, "fused.padded"]); // 640 chunks of 1024 leaves
  assert.deepEqual(split("rms", 2560, "f32"), [128, 8, "fused.padded"]);
  assert.deepEqual(split("rms", 4104), [128, 8, "fused.padded"]); // 513 chunks of 1024
  assert.deepEqual(split("rms", 5128), [256, 4, "fused.few"]); // 641 chunks: past 5/8
  assert.deepEqual(split("rms", 4096), [128, 4, "fused.few"]);
  assert.deepEqual(split("layer", 5120), [256, 4, "fused.few"]); // LayerNorm keeps 4
  assert.deepEqual(split("rms", 5120, "bf16", 1), [256, 4, "fused.latency"]); // decode unchanged
  assert.deepEqual(split("rms", 10240), [256, 8, "fused.block"]); // past 1024 chunks: 8 anyway
  assert.deepEqual(split("rms", 5120, "bf16", 100_000, "hip"), [128, 8, "fused.block"]);
  assert.deepEqual(split("rms", 160), [8, 4, "fused.short"]); // 20 chunks of 32: short rows keep their rule
  assert.deepEqual(split("rms", 264), [16, 4, "fused.few"]); // 33 chunks of 64: sub-warp rows at 4 keep it
  assert.deepEqual(split("rms", 1032), [32, 8, "fused.padded"]); // 129 chunks of 256: a warp a row at 8
});

test("LayerNorm: every split of a row runs one kernel family on CUDA (its statistics' arithmetic)", () => {
  // The few-chunk kernels take LayerNorm's statistics in one pass, the 8-chunk kernels in two (kernels/fused.cuh,
  // nk_ln_stats): a row's bits are the same in every call only while its row length never moves between them.
  const rowCounts = [1, 2, 8, 131, 132, 133, 300, 1000, 4096, 65_536, 1_000_000];
  for (const dtype of ["f32", "f16", "bf16"] as const) {
    for (const d of SWEEP_DS) {
      const families = new Set<string>();
      for (const rows of rowCounts) {
        const g = fusedGeometry("layer", d, dtype, H200, rows, "cuda");
        if ("unsupported" in g) continue;
        const k = fusedKernelFor("layer", dtype, dtype, "f32", g, "cuda");
        assert.ok("kernel" in k);
        families.add(k.variant === "fused.nv8" ? "8-chunk" : "few-chunk");
      }
      assert.ok(families.size <= 1, `LayerNorm ${dtype} D ${d}: ${[...families].join(" and ")}`);
    }
  }
});

test("short rows take a chunk a lane while all their lanes fit one wave (fused.wave), then 4 chunks a lane", () => {
  // D 128 bf16: 16 chunks; one wave is multiprocessors × FUSED_SM_THREADS lanes of a chunk each.
  const wave = (H200.multiprocessors * FUSED_SM_THREADS) / 16;
  const split = (d: number, rows: number, dtype = "bf16") => {
    const g = geometry("rms", d, dtype, rows);
    return [g.tpr, g.nv, g.rule];
  };
  assert.deepEqual(split(128, 40), [16, 1, "fused.latency"]); // 1 token of 32 + 8 heads
  assert.deepEqual(split(128, 320), [16, 1, "fused.wave"]); // 8 tokens
  assert.deepEqual(split(128, wave), [16, 1, "fused.wave"]);
  assert.deepEqual(split(128, wave + 1), [4, 4, "fused.short"]);
  assert.deepEqual(split(256, 262_144), [8, 4, "fused.short"]); // 32 chunks
  assert.deepEqual(split(128, 262_144, "f32"), [8, 4, "fused.short"]);
  assert.deepEqual(split(16, 1_000_000), [1, 2, "fused.short"]); // 2 chunks: both in one lane
  assert.deepEqual(split(256, 2000), [32, 1, "fused.wave"]); // 32 chunks: a warp a row
  assert.deepEqual(split(128, 2000, "f32"), [32, 1, "fused.wave"]);
  assert.deepEqual(split(264, 200), [16, 4, "fused.few"]); // 33 chunks, 64 leaves: past a warp at a chunk a lane
  assert.deepEqual(split(1024, 200), [32, 4, "fused.few"]);
});

test("unsupported rows, dtypes and limits give a sentence naming what is wrong", () => {
  const why = (r: ReturnType<typeof fusedGeometry>): string => {
    assert.ok("unsupported" in r, JSON.stringify(r));
    return r.unsupported;
  };
  assert.match(
    why(fusedGeometry("rms", 65537, "bf16", H200, 1, "cuda")),
    /at most 65536 bf16 elements .*not d = 65537/,
  );
  assert.match(why(fusedGeometry("layer", 32769, "f32", H200, 1, "cuda")), /at most 32768 f32 elements/);
  assert.equal("unsupported" in fusedGeometry("layer", 65536, "f16", H200, 1, "cuda"), false);
  assert.match(why(fusedGeometry("rms", 0, "f16", H200, 1, "cuda")), /d must be a whole number ≥ 1, not 0/);
  assert.match(why(fusedGeometry("rms", 2.5, "f16", H200, 1, "cuda")), /not 2\.5/);
  assert.match(why(fusedGeometry("rms", 128, "fp8e4m3", H200, 1, "cuda")), /x in f32, f16 or bf16, not fp8e4m3/);
  assert.match(
    why(fusedGeometry("rms", 65536, "bf16", { ...H200, maxThreadsPerBlock: 512 }, 1, "cuda")),
    /512 threads/,
  );
  assert.match(why(fusedGeometry("other" as "rms", 128, "f16", H200, 1, "cuda")), /kind must be/);
});

test("kernel names: 20 built triples per kind, each in the 3 CUDA variants, named as kernels/fused.cu names them", () => {
  assert.equal(FUSED_KERNELS.length, 120);
  assert.equal(new Set(FUSED_KERNELS).size, 120);
  for (const k of FUSED_KERNELS) {
    assert.match(
      k,
      /^nk_fused_(ln|rms)_(f32|f16|bf16)_(f32|f16|bf16|fp8e4m3|fp8e5m2|int8)_(f32|f16|bf16)(_nv2|_nv4)?$/,
    );
  }
  assert.equal(fusedKernelName("layer", "bf16", "fp8e4m3", "f32"), "nk_fused_ln_bf16_fp8e4m3_f32");
  assert.equal(fusedKernelName("layer", "bf16", "fp8e4m3", "f32", "_nv2"), "nk_fused_ln_bf16_fp8e4m3_f32_nv2");
  const counts = FUSED_TRIPLES.map((r) => r.to.length * r.tw.length);
  assert.deepEqual(counts, [4, 8, 8]);
  for (const kind of KINDS) {
    for (const r of FUSED_TRIPLES) {
      for (const to of r.to) {
        for (const tw of r.tw) {
          for (const g of [{ nv: 1, block: 256 }, { nv: 8, block: 256 }]) {
            const k = fusedKernelFor(kind, r.ti, to, tw, g, "cuda");
            assert.ok("kernel" in k && FUSED_KERNELS.includes(k.kernel), JSON.stringify(k));
          }
        }
      }
    }
  }
});

test("the kernel variant on CUDA: _nv2 to 2 chunks a thread, _nv4 to 4, where blocks fit 256; never on HIP", () => {
  const seen = new Set<string>();
  for (const kind of KINDS) {
    for (const dtype of ["f32", "f16", "bf16"] as const) {
      for (const d of [8, 128, 768, 2048, 4096, 5120, 8192, 16384]) {
        for (const rows of [1, 8, 132, 133, 320, 4096, 524288]) {
          const g = fusedGeometry(kind, d, dtype, H200, rows, "cuda");
          assert.ok(!("unsupported" in g));
          const k = fusedKernelFor(kind, dtype, dtype, "f32", g, "cuda");
          assert.ok("kernel" in k);
          const at = `${kind} ${dtype} D ${d} rows ${rows}: ${JSON.stringify(g)}`;
          const suffix = g.nv <= 2 ? "_nv2" : g.nv <= 4 ? "_nv4" : "";
          assert.equal(k.kernel, fusedKernelName(kind, dtype, dtype, "f32", suffix), at);
          // Every plan geometry of at most 4 chunks a thread fits the few-chunk kernels' blocks.
          if (suffix) assert.ok(g.block <= FUSED_FEW_THREADS, at);
          seen.add(k.variant);
        }
      }
    }
  }
  assert.deepEqual([...seen].sort(), FUSED_VARIANTS.map((v) => v.id).sort());
  // HIP: the one kernel per triple for every geometry (the AMD code objects have no few-chunk kernels).
  for (const [d, rows] of [[2048, 1], [2048, 8], [2048, 132], [8192, 1]]) {
    const g = fusedGeometry("rms", d, "bf16", H200, rows, "cuda");
    assert.ok(!("unsupported" in g) && g.nv === d / 2048);
    assert.deepEqual(fusedKernelFor("rms", "bf16", "bf16", "bf16", g, "hip"), {
      kernel: "nk_fused_rms_bf16_bf16_bf16",
      variant: "fused.nv8",
    });
  }
  // Decode of one bf16 row: D 2048 and 4096 (1 and 2 chunks a thread of 256) take _nv2, D 8192 (4 chunks) _nv4,
  // D 16384 (8 chunks) the 8-chunk kernel.
  const decode = (d: number) => {
    const g = fusedGeometry("rms", d, "bf16", H200, 1, "cuda");
    assert.ok(!("unsupported" in g));
    const k = fusedKernelFor("rms", "bf16", "fp8e4m3", "bf16", g, "cuda");
    return "kernel" in k ? k.kernel : k.unsupported;
  };
  assert.equal(decode(2048), "nk_fused_rms_bf16_fp8e4m3_bf16_nv2");
  assert.equal(decode(4096), "nk_fused_rms_bf16_fp8e4m3_bf16_nv2");
  assert.equal(decode(8192), "nk_fused_rms_bf16_fp8e4m3_bf16_nv4");
  assert.equal(decode(16384), "nk_fused_rms_bf16_fp8e4m3_bf16");
});

test("dtype triples without a fused kernel give a sentence naming the dtype", () => {
  const G = { nv: 8, block: 256 };
  const why = (r: ReturnType<typeof fusedKernelFor>): string => {
    assert.ok("unsupported" in r, JSON.stringify(r));
    return r.unsupported;
  };
  assert.match(
    why(fusedKernelFor("rms", "f16", "f32", "f16", G, "cuda")),
    /f16 x's output as f16, fp8e4m3, fp8e5m2, int8, not f32/,
  );
  assert.match(why(fusedKernelFor("rms", "f32", "f32", "f16", G, "cuda")), /f32 x's weights as f32, not f16/);
  assert.match(
    why(fusedKernelFor("layer", "bf16", "bf16", "f16", G, "cuda")),
    /bf16 x's weights as f32 or bf16, not f16/,
  );
  assert.match(why(fusedKernelFor("layer", "int8", "int8", "f32", G, "cuda")), /x in f32, f16 or bf16, not int8/);
});
