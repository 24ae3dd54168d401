// The fused kernels' images and interface, without a GPU: precompiled/fused_cuda.ts against kernels/fused.cu, the SASS
// images' symbol tables and parameter layout (the fused images of a float y, the fused_quant ones of a quantized y),
// and ops/fused_abi.ts against the kernel source.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { zstdDecompressSync } from "node:zlib";
import {
  FUSED_CUDA_IMAGES,
  FUSED_KERNELS,
  FUSED_QUANT_CUDA_IMAGES,
  FUSED_QUANT_KERNELS,
  FUSED_SOURCE_FILES,
  FUSED_SOURCE_SHA256,
} from "../../precompiled/fused_cuda.ts";
import { fusedImageOf } from "../../ops/fused_module.ts";
import { FUSED_ADD_ARGS, FUSED_ARGS, FUSED_PARAMS, FUSED_QUANT } from "../../ops/fused_abi.ts";
import { dependentLaunchByDefault } from "../../ops/kernels.ts";
import {
  FUSED_FEW_THREADS,
  FUSED_KERNELS as PLANNED_KERNELS,
  FUSED_MAXV,
  FUSED_VARIANTS,
  fusedKernelFor,
} from "../../ops/plan_fused.ts";
import type { ArgType } from "../../runtime/module.ts";
import { cLayout, elfFunctions, kernelParams, parseFatbin, sassElf } from "../fixtures/fatbin.ts";
import * as ptxPackage from "../../packages/ptx/mod.ts";

const root = new URL("../../", import.meta.url);
/** The norm kernels of both images, in fused.cu's order (the rest are nk_fused_add_*). */
const QUANT_NAME = /^nk_fused_(ln|rms)_[a-z0-9]+_(fp8e4m3|fp8e5m2|int8)_/;
const BUILT = [...FUSED_KERNELS, ...FUSED_QUANT_KERNELS];
const NORMS = PLANNED_KERNELS.filter((k) => BUILT.includes(k));
const read = (rel: string): Uint8Array => new Uint8Array(readFileSync(new URL(rel, root)));
const text = (rel: string): string => readFileSync(new URL(rel, root), "utf8");
/** fused.cu's NK_FUSED_KERNEL body and the CUDA body of NK_FUSED_FEW_KERNEL (the _nv2 and _nv4 kernels; empty under
 * HIP). */
function kernelMacros(): { main: string; few: string } {
  const src = text("kernels/fused.cu");
  const main = src.match(/^#define NK_FUSED_KERNELS_OF\(kind, isln, ti, to, tw\)([\s\S]*?)\n\n/m);
  const few = src.match(
    /^#if defined\(__HIP__\)\n#define NK_FUSED_FEW_KERNEL\(kind, isln, ti, to, tw, maxv\)\n#else\n#define NK_FUSED_FEW_KERNEL\(kind, isln, ti, to, tw, maxv\)([\s\S]*?)\n#endif$/m,
  );
  assert.ok(main && few, "NK_FUSED_KERNEL and NK_FUSED_FEW_KERNEL (empty under __HIP__) in fused.cu");
  return { main: main[1].trim(), few: few[1] };
}

test("fused_cuda.ts lists the 120 kernels nk_fused_{ln|rms}_{ti}_{to}_{tw}, _nv2 and _nv4, from fused.cu's lines", () => {
  assert.equal(NORMS.length, 120);
  assert.deepEqual(
    BUILT.filter((k) => !k.startsWith("nk_fused_add_")).sort(),
    [...PLANNED_KERNELS].sort(),
    "the plan's kernels are the built kernels",
  );
  // Split by y's dtype: a float y (30) and the residual gradient's adds in one image, a quantized y (90) in the other;
  // ops/fused_module.ts looks each up in its image.
  assert.deepEqual([...FUSED_KERNELS], [
    ...NORMS.filter((k) => !QUANT_NAME.test(k)),
    "nk_fused_add_f32",
    "nk_fused_add_f16",
    "nk_fused_add_bf16",
  ]);
  assert.deepEqual([...FUSED_QUANT_KERNELS], NORMS.filter((k) => QUANT_NAME.test(k)));
  assert.deepEqual([FUSED_KERNELS.length, FUSED_QUANT_KERNELS.length], [33, 90]);
  for (const k of FUSED_KERNELS) assert.equal(fusedImageOf(k), "fused", k);
  for (const k of FUSED_QUANT_KERNELS) assert.equal(fusedImageOf(k), "fusedQuant", k);
  const lines = [
    ...text("kernels/fused.cu").matchAll(/^NK_FUSED_KERNEL\((\w+), (true|false), (\w+), (\w+), (\w+)\)$/gm),
  ];
  assert.equal(lines.length, 40);
  assert.deepEqual(
    lines.flatMap((m) => ["", "_nv2", "_nv4"].map((v) => `nk_fused_${m[1]}_${m[3]}_${m[4]}_${m[5]}${v}`)),
    [...NORMS],
  );
  for (const m of lines) assert.equal(m[2], m[1] === "ln" ? "true" : "false", m[0]);
  for (const ti of ["f32", "f16", "bf16"]) {
    const mine = NORMS.filter((k) => k.startsWith(`nk_fused_ln_${ti}_`));
    assert.equal(mine.length, ti === "f32" ? 12 : 24, ti);
  }
  assert.ok(FUSED_QUANT_KERNELS.includes("nk_fused_rms_bf16_fp8e4m3_bf16"));
  assert.ok(FUSED_QUANT_KERNELS.includes("nk_fused_rms_bf16_fp8e4m3_bf16_nv2"));
  assert.ok(FUSED_QUANT_KERNELS.includes("nk_fused_rms_bf16_fp8e4m3_bf16_nv4"));
  assert.ok(!NORMS.includes("nk_fused_rms_f32_f32_f16"));
});

test("the few-chunk kernels' bounds in fused.cu(h) are the plan's, and the kernels of a triple share one body", () => {
  const src = text("kernels/fused.cuh");
  const define = (name: string) => Number(src.match(new RegExp(`^#define ${name} (\\d+)$`, "m"))?.[1]);
  assert.equal(define("NK_FUSED_FEW_THREADS"), FUSED_FEW_THREADS);
  const { main, few } = kernelMacros();
  assert.match(main, /NK_LAUNCH_BOUNDS\(NK_FUSED_MAX_THREADS\)[\s\S]*NK_FUSED_MAXV, NK_FUSED_MAX_THREADS>/);
  // One NK_FUSED_FEW_KERNEL line per few-chunk variant, its chunk bound the variant's maxv and name suffix.
  const fewLines = [...main.matchAll(/NK_FUSED_FEW_KERNEL\(kind, isln, ti, to, tw, (\d+)\)/g)].map((m) => Number(m[1]));
  const fewVariants = FUSED_VARIANTS.filter((v) => v.maxThreads === FUSED_FEW_THREADS);
  assert.deepEqual(fewLines, fewVariants.map((v) => v.maxv));
  for (const v of fewVariants) assert.equal(v.suffix, `_nv${v.maxv}`, v.id);
  assert.deepEqual(FUSED_VARIANTS.filter((v) => v.maxThreads !== FUSED_FEW_THREADS).map((v) => [v.maxv, v.suffix]), [
    [FUSED_MAXV, ""],
  ]);
  // Their block bound is the plan's; the _nv4 kernels ask for blocks an SM: 4 of a float y, 3 of RMSNorm's quantized y,
  // 4 of LayerNorm's quantized y on bf16 x.
  assert.match(
    few,
    /NK_LAUNCH_BOUNDS_MIN\(NK_FUSED_FEW_THREADS,\s*\\\s*nk_fused_min_blocks\(maxv, isln, nk_is_quant<nk_##to>::V,\s*\\\s*nk_is_bf16<nk_##ti>::V\)\)[\s\S]*_nv##maxv\([\s\S]*maxv, NK_FUSED_FEW_THREADS>/,
  );
  const fused = text("kernels/fused.cu");
  assert.match(
    fused,
    /^constexpr int nk_fused_min_blocks\(int maxv, bool ln, bool quant, bool bf16\) \{\n {2}return maxv != 4 \? 0 : !quant \? 4 : !ln \? 3 : bf16 \? 4 : 0;\n\}$/m,
  );
  assert.match(text("kernels/fused.cuh"), /^struct nk_is_bf16<nk_bf16> \{\n {2}enum \{ V = 1 \};\n\};$/m);
});

test("fused_cuda.ts was generated from the current sources (run bash scripts/build-fused.sh otherwise)", () => {
  const h = createHash("sha256");
  for (const f of FUSED_SOURCE_FILES) h.update(read(f));
  assert.equal(h.digest("hex"), FUSED_SOURCE_SHA256);
  // Every file fused.cu includes, directly or through another, is hashed.
  const included = new Set<string>();
  const visit = (f: string) => {
    for (const m of text(f).matchAll(/^#include "([^"]+)"/gm)) {
      const dep = `kernels/${m[1]}`;
      if (!included.has(dep)) included.add(dep), visit(dep);
    }
  };
  visit("kernels/fused.cu");
  assert.deepEqual([...included].filter((f) => !FUSED_SOURCE_FILES.includes(f)), []);
});

/** Each image: its file prefix, its kernels, its SASS images by target and its set in @normkit/ptx. */
const IMAGES = [
  { prefix: "fused", kernels: FUSED_KERNELS, cuda: FUSED_CUDA_IMAGES, ptx: ptxPackage.fused },
  { prefix: "fused_quant", kernels: FUSED_QUANT_KERNELS, cuda: FUSED_QUANT_CUDA_IMAGES, ptx: ptxPackage.fusedQuant },
] as const;

for (const { prefix, kernels, cuda } of IMAGES) {
  for (const [target, arch] of [["sm_80", 80], ["sm_90", 90]] as const) {
    test(`the ${prefix} ${target} image defines exactly its kernels, each with FUSED_ARGS' parameter layout`, () => {
      const file = `precompiled/${prefix}_${target.replace("_", "")}.fatbin`;
      assert.ok(cuda[target].href.endsWith(`/${file}`), cuda[target].href);
      const elf = sassElf(read(file));
      assert.equal(elf[18] | (elf[19] << 8), 190, "e_machine EM_CUDA");
      assert.equal(new DataView(elf.buffer, elf.byteOffset).getUint32(0x30, true) >> 8 & 0xff, arch, "e_flags: SM");
      assert.deepEqual([...elfFunctions(elf)].sort(), [...kernels].sort());
      const want = cLayout(FUSED_ARGS), wantAdd = cLayout(FUSED_ADD_ARGS);
      for (const k of kernels) {
        assert.deepEqual(kernelParams(elf, k), k.startsWith("nk_fused_add_") ? wantAdd : want, k);
      }
    });
  }
}

test("the images stay small (SASS and PTX, compressed); the quantized kernels' apart", () => {
  const size = (f: string) => read(f).byteLength;
  for (const arch of ["sm80", "sm90"]) {
    for (const [f, limit] of [[`fused_${arch}`, 250_000], [`fused_quant_${arch}`, 650_000]] as const) {
      const n = size(`precompiled/${f}.fatbin`);
      assert.ok(n < limit, `precompiled/${f}.fatbin is ${n} bytes (limit ${limit})`);
    }
  }
  const ptx = size("packages/ptx/fused_compute90.fatbin") + size("packages/ptx/fused_quant_compute90.fatbin");
  assert.ok(ptx < 1_700_000, `the fused PTX is ${ptx} bytes`);
});

/** The text of packages/ptx/<prefix>_compute90.fatbin: one zstd-compressed PTX entry for compute_90 (read once). */
const ptxTexts = new Map<string, string>();
function fusedPtx(prefix: string): string {
  const known = ptxTexts.get(prefix);
  if (known !== undefined) return known;
  const bytes = read(`packages/ptx/${prefix}_compute90.fatbin`);
  const entries = parseFatbin(bytes);
  assert.deepEqual(entries.map((e) => [e.kind, e.arch]), [[1, 90]], "one PTX entry for compute_90");
  const ptx = new TextDecoder().decode(
    zstdDecompressSync(bytes.subarray(entries[0].offset, entries[0].offset + entries[0].size)),
  );
  ptxTexts.set(prefix, ptx);
  return ptx;
}
/** Each kernel of the fused PTX (both images): its name and its text, from its `.entry` line to the next kernel's. */
function fusedPtxKernels(): [name: string, body: string][] {
  return IMAGES.flatMap(({ prefix }) => {
    const ptx = fusedPtx(prefix);
    const starts = [...ptx.matchAll(/^\.visible \.entry (\w+)\(/gm)];
    return starts.map((m, i): [string, string] => [m[1], ptx.slice(m.index, starts[i + 1]?.index ?? ptx.length)]);
  });
}

for (const { prefix, kernels, ptx: set } of IMAGES) {
  test(`the compute_90 PTX of ${prefix} (@normkit/ptx) targets sm_90, has its kernels with FUSED_ARGS' types`, () => {
    const file = `packages/ptx/${prefix}_compute90.fatbin`;
    assert.deepEqual(Object.keys(set.images), ["compute_90"]);
    assert.ok(set.images.compute_90.href.endsWith(`/${file}`));
    assert.equal(set.sourceSha256, FUSED_SOURCE_SHA256, "packages/ptx/fused_build.ts: the same sources");
    const ptx = fusedPtx(prefix);
    assert.match(ptx, /^\.target sm_90$/m);
    const params = new Map(
      [...ptx.matchAll(/^\.visible \.entry (\w+)\(([^)]*)\)/gm)].map((m) => [
        m[1],
        [...m[2].matchAll(/\.param \.(\w+)/g)].map((p) => p[1]),
      ]),
    );
    assert.deepEqual([...params.keys()].sort(), [...kernels].sort());
    const ptxType: Record<string, string> = { ptr: "u64", i64: "u64", i32: "u32", f32: "f32" };
    for (const [k, types] of params) {
      const want = (k.startsWith("nk_fused_add_") ? FUSED_ADD_ARGS : FUSED_ARGS).map((t) => ptxType[t]);
      assert.deepEqual(types, want, k);
    }
  });
}

/** NK_FUSED_PARAMS / NK_FUSED_ARGS of kernels/fused.cuh: the macro's text, continuation lines joined. */
function macroBody(src: string, name: string): string {
  const m = src.match(new RegExp(`^#define ${name}\\b((?:.*\\\\\\n)*.*)$`, "m"));
  assert.ok(m, `#define ${name}`);
  return m[1].replace(/\\\n/g, " ");
}

const C_TYPES: Record<string, ArgType> = {
  "const void *": "ptr",
  "void *": "ptr",
  "float *": "ptr",
  "int": "i32",
  "long long": "i64",
  "float": "f32",
};

test("FUSED_PARAMS (ops/fused_abi.ts) is the kernel's parameter list: names and types in order", () => {
  const src = text("kernels/fused.cuh");
  // "const void *x, const void *residual, ..., long long x_s0, long long x_s1, ...": each declarator takes the type
  // of its declaration (`a, b` after a type share it only through `*` spelled per name, as here).
  const params = macroBody(src, "NK_FUSED_PARAMS").split(",").map((p) => p.trim().replace(/\s+/g, " "));
  const parsed = params.map((p) => {
    const m = p.match(/^(.*?)\s*(\*?)\s*(\w+)$/);
    assert.ok(m, p);
    const type = (m[2] ? `${m[1]} *` : m[1]).trim();
    assert.ok(type in C_TYPES, `C type ${type} of ${p}`);
    return { name: m[3], type: C_TYPES[type] };
  });
  assert.deepEqual(parsed, FUSED_PARAMS.map((p) => ({ ...p })));
  assert.equal(FUSED_ARGS.length, 28);
  assert.deepEqual(FUSED_ARGS, FUSED_PARAMS.map((p) => p.type));
  const args = macroBody(src, "NK_FUSED_ARGS").split(",").map((a) => a.trim());
  assert.deepEqual(args, FUSED_PARAMS.map((p) => p.name));
  const define = (name: string) => Number(src.match(new RegExp(`^#define ${name} (\\d+)$`, "m"))?.[1]);
  assert.equal(define("NK_FUSED_MAXV"), FUSED_MAXV);
  assert.equal(define("NK_QUANT_NONE"), FUSED_QUANT.none);
  assert.equal(define("NK_QUANT_STATIC"), FUSED_QUANT.static);
  assert.equal(define("NK_QUANT_DYNAMIC"), FUSED_QUANT.dynamic);
});

test("fusedKernelFor: y of x's dtype or quantized, weights f32 or x's dtype; anything else a sentence", () => {
  const many = { nv: 8, block: 256 };
  assert.deepEqual(fusedKernelFor("layer", "bf16", "fp8e4m3", "f32", many, "cuda"), {
    kernel: "nk_fused_ln_bf16_fp8e4m3_f32",
    variant: "fused.nv8",
  });
  assert.deepEqual(fusedKernelFor("rms", "f16", "f16", "f16", many, "cuda"), {
    kernel: "nk_fused_rms_f16_f16_f16",
    variant: "fused.nv8",
  });
  for (const [ti, to, tw] of [["f16", "bf16", "f16"], ["f32", "f32", "bf16"], ["bf16", "int8", "f16"]]) {
    const r = fusedKernelFor("rms", ti, to, tw, many, "cuda");
    assert.ok("unsupported" in r && /fused kernels/.test(r.unsupported), `${ti}/${to}/${tw}`);
  }
});

test("fusedKernelFor: _nv2 to 2 chunks a thread, _nv4 to 4, in blocks of at most 256, else the 8-chunk kernel", () => {
  const name = (g: { nv: number; block: number }) => {
    const r = fusedKernelFor("rms", "bf16", "fp8e4m3", "bf16", g, "cuda");
    assert.ok("kernel" in r);
    return r.kernel;
  };
  assert.equal(name({ nv: 1, block: 256 }), "nk_fused_rms_bf16_fp8e4m3_bf16_nv2");
  assert.equal(name({ nv: 2, block: 128 }), "nk_fused_rms_bf16_fp8e4m3_bf16_nv2");
  assert.equal(name({ nv: 4, block: 256 }), "nk_fused_rms_bf16_fp8e4m3_bf16_nv4");
  assert.equal(name({ nv: 4, block: 32 }), "nk_fused_rms_bf16_fp8e4m3_bf16_nv4");
  assert.equal(name({ nv: 8, block: 256 }), "nk_fused_rms_bf16_fp8e4m3_bf16");
  assert.equal(name({ nv: 1, block: 512 }), "nk_fused_rms_bf16_fp8e4m3_bf16");
  assert.equal(name({ nv: 2, block: 1024 }), "nk_fused_rms_bf16_fp8e4m3_bf16");
});

test("dependent launch: the 120 fused norm kernels by default, each waiting before any memory access; not nk_fused_add_*", () => {
  assert.deepEqual(BUILT.filter(dependentLaunchByDefault).sort(), [...NORMS].sort());
  // In the compute_90 PTX (the sm_90 SASS comes from the same source by the same nvcc run): before a kernel's first
  // griddepcontrol.wait, no load or store but of its parameters, shared or local memory, and no return.
  const memory = /^\s*(?:@!?%p\d+\s+)?(?:ld|st|atom|red|prefetchu?|cp\.async[\w.]*)\.(?!param|shared|local|const)\S*/m;
  for (const [name, body] of fusedPtxKernels()) {
    if (!NORMS.includes(name)) continue;
    const wait = body.indexOf("griddepcontrol.wait;");
    assert.ok(wait > 0, `${name}: griddepcontrol.wait`);
    assert.ok(body.indexOf("griddepcontrol.launch_dependents;", wait) > wait, `${name}: launch_dependents after it`);
    const before = body.slice(0, wait);
    assert.doesNotMatch(before, memory, `${name}: a memory access before griddepcontrol.wait`);
    assert.doesNotMatch(before, /^\s*(?:@!?%p\d+\s+)?ret;/m, `${name}: a return before griddepcontrol.wait`);
  }
});

test("every fused norm kernel stores 16-byte chunks of h and y as one vector store, never as four 4-byte stores", () => {
  // In these kernels nvcc compiles a 16-byte struct store as four st.global.u32 at +0, +4, +8, +12 (a quarter of each 16
  // bytes per warp store); kernels/fused.cuh's nk_store_v4 issues st.global.wb.v4.u32. The SASS images are compiled from
  // the same source by the same nvcc run.
  const kernels = fusedPtxKernels();
  assert.equal(kernels.length, BUILT.length);
  for (const [name, body] of kernels) {
    if (name.startsWith("nk_fused_add_")) continue;
    assert.ok(/st\.global\.wb\.v4\.u32/.test(body), `${name}: a 16-byte vector store`);
    const offsets = new Map<string, Set<number>>();
    for (const st of body.matchAll(/st\.global\.u32\s+\[(%rd\d+)(?:\+(\d+))?\]/g)) {
      const seen = offsets.get(st[1]) ?? new Set<number>();
      offsets.set(st[1], seen.add(Number(st[2] ?? 0)));
    }
    for (const [base, seen] of offsets) {
      assert.ok(![0, 4, 8, 12].every((o) => seen.has(o)), `${name}: four 4-byte stores at ${base} + 0, 4, 8, 12`);
    }
  }
});
