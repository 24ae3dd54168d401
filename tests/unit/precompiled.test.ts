// Checks, without a GPU, that precompiled/norm_cuda.ts matches the images (precompiled/, packages/ptx/) and kernels/.
// Runs under `deno test --allow-read tests/unit/precompiled.test.ts` and `bun test ./tests/unit/precompiled.test.ts`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { zstdDecompressSync } from "node:zlib";
import {
  NORM_BWD_CUDA_IMAGES,
  NORM_BWD_KERNELS,
  NORM_CUDA_IMAGES,
  NORM_KERNELS,
  NORM_SOURCE_FILES,
  NORM_SOURCE_SHA256,
} from "../../precompiled/norm_cuda.ts";
import * as ptxPackage from "../../packages/ptx/mod.ts";
import { planLimits } from "../../ops/kernels.ts";
import { planNorm } from "../../ops/plan.ts";
import { DTYPES } from "../../runtime/dtype.ts";
import { FAKE_H200 } from "../fixtures/fake_cuda.ts";

const root = new URL("../../", import.meta.url);
const read = (rel: string): Uint8Array => new Uint8Array(readFileSync(new URL(rel, root)));
const IMAGES = ["precompiled/norm_sm80.fatbin", "precompiled/norm_sm90.fatbin", "packages/ptx/norm_compute90.fatbin"];
const BWD_IMAGES = [
  "precompiled/norm_bwd_sm80.fatbin",
  "precompiled/norm_bwd_sm90.fatbin",
  "packages/ptx/norm_bwd_compute90.fatbin",
];

const FATBIN_MAGIC = 0xba55ed50;
const KIND_PTX = 1;
const KIND_ELF = 2;
const FLAG_COMPRESSED = 0x2000n | 0x8000n; // either bit marks a compressed payload

interface FatbinEntry {
  kind: number;
  arch: number; // 80 = sm_80
  flags: bigint;
  offset: number; // payload offset in the file
  size: number; // payload size (stored bytes)
}

// Fatbin layout (as written by nvcc/fatbinary): 16-byte header {u32 magic, u16 version,
// u16 header size, u64 size of what follows}, then entries {u16 kind, u16 version, u32 header size,
// u64 payload size, ..., u32 arch at +28, u64 flags at +40, ...} each followed by its payload.
function parseFatbin(bytes: Uint8Array): FatbinEntry[] {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  assert.equal(v.getUint32(0, true), FATBIN_MAGIC, "fatbin magic");
  assert.equal(v.getUint16(4, true), 1, "fatbin version");
  const headerSize = v.getUint16(6, true);
  const end = headerSize + Number(v.getBigUint64(8, true));
  assert.equal(
    end,
    bytes.byteLength,
    "fatbin size field covers the whole file",
  );
  const entries: FatbinEntry[] = [];
  let off = headerSize;
  while (off < end) {
    const kind = v.getUint16(off, true);
    const ehs = v.getUint32(off + 4, true);
    const size = Number(v.getBigUint64(off + 8, true));
    assert.ok(
      ehs >= 64 && off + ehs + size <= end,
      `fatbin entry at ${off} fits`,
    );
    entries.push({
      kind,
      arch: v.getUint32(off + 28, true),
      flags: v.getBigUint64(off + 40, true),
      offset: off + ehs,
      size,
    });
    off += ehs + size;
  }
  assert.equal(off, end, "fatbin entries end exactly at the end of the file");
  return entries;
}

test("scripts/fatbin.sh writes one fatbin of the three images' entries (what the C benchmarks load)", () => {
  const dir = mkdtempSync(join(tmpdir(), "normkit-fatbin-"));
  try {
    const out = join(dir, "norm.fatbin");
    execFileSync("bash", [fileURLToPath(new URL("scripts/fatbin.sh", root)), out]);
    const all = new Uint8Array(readFileSync(out));
    const entries = parseFatbin(all);
    assert.equal(entries.length, 3);
    IMAGES.forEach((f, i) => {
      const [e] = parseFatbin(read(f));
      assert.deepEqual(
        all.subarray(entries[i].offset, entries[i].offset + entries[i].size),
        read(f).subarray(e.offset, e.offset + e.size),
        f,
      );
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the compute_90 PTX (packages/ptx) targets sm_90 and has an .entry for every kernel of its image", () => {
  for (const [file, kernels] of [[IMAGES[2], NORM_KERNELS], [BWD_IMAGES[2], NORM_BWD_KERNELS]] as const) {
    const [e] = parseFatbin(read(file));
    const ptx = new TextDecoder().decode(zstdDecompressSync(read(file).subarray(e.offset, e.offset + e.size)));
    assert.match(ptx, /^\.target sm_90$/m);
    const entries = [...ptx.matchAll(/^\.visible \.entry (\w+)\(/gm)].map((m) => m[1]);
    assert.deepEqual([...entries].sort(), [...kernels].sort(), file);
  }
  assert.equal(ptxPackage.sourceSha256, NORM_SOURCE_SHA256, "packages/ptx/build.ts: the same sources");
  assert.equal(ptxPackage.backward.sourceSha256, NORM_SOURCE_SHA256);
});

// The fast forward kernels: kind x mapping x (input, output, weight/bias) dtype triple.
const FWD_TRIPLES = [
  "f32_f32_f32",
  "f32_f16_f32",
  "f32_bf16_f32",
  "f16_f32_f32",
  "f16_f16_f32",
  "f16_bf16_f32",
  "f16_f32_f16",
  "f16_f16_f16",
  "f16_bf16_f16",
  "bf16_f32_f32",
  "bf16_f16_f32",
  "bf16_bf16_f32",
  "bf16_f32_bf16",
  "bf16_f16_bf16",
  "bf16_bf16_bf16",
];
const FWD_KERNELS = FWD_TRIPLES.flatMap((t) =>
  ["ln", "rms"].flatMap((k) =>
    [
      "rows",
      "block",
      "cluster",
      "wide",
      "latency",
      "stash",
      ...(k === "ln" ? ["blockfull", "clusterfull", "rowstwopass", "rowstile"] : ["rowstile"]),
    ].map((m) => `nk_${k}_${m}_${t}`)
  )
);

// The backward kernels: kind x mapping x (x, dy, weight) dtype triple (the same 15 triples), then the finalize.
const BWD_KERNELS = FWD_TRIPLES.flatMap((t) =>
  ["ln", "rms"].flatMap((k) => ["cached", "wide", "rowsum", "tile", "cluster"].map((m) => `nk_${k}_bwd_${m}_${t}`))
);
// The bulk-staged backward kernels (sm_90): LayerNorm's one-row blocks and both kinds' clusters, for x and dy of one
// dtype (kernels/norm.cu, NK_BWD_STAGED_DTYPES).
const STAGED_KERNELS = ["f32_f32_f32", "f16_f16_f32", "f16_f16_f16", "bf16_bf16_f32", "bf16_bf16_bf16"].flatMap((
  t,
) => [`nk_ln_bwd_cachedstaged_${t}`, `nk_ln_bwd_clusterstaged_${t}`, `nk_rms_bwd_clusterstaged_${t}`]);
const DIAG_KERNELS = ["nk_diag_partial_f32", "nk_diag_partial_f16", "nk_diag_partial_bf16", "nk_diag_final"];
const FINALIZE_KERNELS = ["nk_bwd_finalize_f32", "nk_bwd_finalize_f16", "nk_bwd_finalize_bf16"];

test("NORM_KERNELS: scale_f32, the diagnostics, 255 forward; NORM_BWD_KERNELS: the finalize, 150 backward, 15 staged", () => {
  // 15 dtype triples × (LN: 6 mappings + blockfull, clusterfull, rowstwopass, rowstile; RMS: 6 mappings + rowstile).
  assert.equal(FWD_KERNELS.length, 255);
  assert.equal(BWD_KERNELS.length, 150);
  assert.equal(STAGED_KERNELS.length, 15);
  assert.deepEqual([...NORM_KERNELS], ["scale_f32", ...DIAG_KERNELS, ...FWD_KERNELS]);
  assert.deepEqual([...NORM_BWD_KERNELS], [...FINALIZE_KERNELS, ...BWD_KERNELS, ...STAGED_KERNELS]);
});

test("NORM_SOURCE_SHA256 matches the kernel sources", () => {
  assert.deepEqual([...NORM_SOURCE_FILES], [
    "kernels/norm.cu",
    "kernels/portable.h",
    "kernels/norm_fwd.cuh",
    "kernels/fwd_common.cuh",
    "kernels/fwd_row_cache.cuh",
    "kernels/fwd_rows.cuh",
    "kernels/fwd_block.cuh",
    "kernels/fwd_cluster.cuh",
    "kernels/fwd_wide.cuh",
    "kernels/fwd_stash.cuh",
    "kernels/diag.cuh",
    "kernels/norm_bwd.cuh",
    "kernels/bwd_common.cuh",
    "kernels/bwd_cached.cuh",
    "kernels/bwd_wide.cuh",
    "kernels/bwd_rowsum_tile.cuh",
    "kernels/bwd_finalize.cuh",
  ]);
  const h = createHash("sha256");
  for (const f of NORM_SOURCE_FILES) h.update(read(f));
  assert.equal(
    h.digest("hex"),
    NORM_SOURCE_SHA256,
    "kernels/ changed: run `bash scripts/build-kernels.sh` and commit precompiled/",
  );
});

test("images: one compressed fatbin entry each (SASS sm_80, SASS sm_90, PTX compute_90), at the URLs the modules name", () => {
  const want = [[KIND_ELF, 80], [KIND_ELF, 90], [KIND_PTX, 90]];
  [...IMAGES, ...BWD_IMAGES].forEach((f, i) => {
    const bytes = read(f);
    assert.deepEqual([...bytes.subarray(0, 4)], [0x50, 0xed, 0x55, 0xba], `${f}: fatbin magic (LE)`);
    const entries = parseFatbin(bytes);
    assert.deepEqual(entries.map((e) => [e.kind, e.arch]), [want[i % 3]], f);
    // -Xfatbin -compress-all: the driver inflates them at load.
    assert.notEqual(entries[0].flags & FLAG_COMPRESSED, 0n, `${f} is compressed`);
  });
  assert.deepEqual(Object.keys(NORM_CUDA_IMAGES), ["sm_80", "sm_90"]);
  assert.ok(NORM_CUDA_IMAGES.sm_80.href.endsWith("/precompiled/norm_sm80.fatbin"));
  assert.ok(NORM_CUDA_IMAGES.sm_90.href.endsWith("/precompiled/norm_sm90.fatbin"));
  assert.deepEqual(Object.keys(NORM_BWD_CUDA_IMAGES), ["sm_80", "sm_90"]);
  assert.ok(NORM_BWD_CUDA_IMAGES.sm_80.href.endsWith("/precompiled/norm_bwd_sm80.fatbin"));
  assert.ok(NORM_BWD_CUDA_IMAGES.sm_90.href.endsWith("/precompiled/norm_bwd_sm90.fatbin"));
  assert.deepEqual(Object.keys(ptxPackage.images), ["compute_90"]);
  assert.ok(ptxPackage.images.compute_90.href.endsWith("/packages/ptx/norm_compute90.fatbin"));
  assert.deepEqual(Object.keys(ptxPackage.backward.images), ["compute_90"]);
  assert.ok(ptxPackage.backward.images.compute_90.href.endsWith("/packages/ptx/norm_bwd_compute90.fatbin"));
});

test("the images stay within their budgets: normkit's own (JSR main package) and each package's", () => {
  // The JSR main package is at most 10,000,000 bytes in all: its SASS images, norm and fused, get 5.2 MB. The PTX and
  // AMD packages have 10 MB each; their images get 9 MB. Every image file of a folder counts.
  const size = (dir: string, pattern: RegExp) => {
    const files = readdirSync(new URL(dir, root)).filter((f) => pattern.test(f));
    assert.ok(files.length > 0, `${dir}: no ${pattern}`);
    return files.reduce((n, f) => n + read(`${dir}/${f}`).length, 0);
  };
  const own = size("precompiled", /^(norm|norm_bwd|fused|fused_quant)_(sm\d+\.fatbin|cuda\.ts)$/);
  assert.ok(own < 5_200_000, `precompiled/ is ${own} bytes`);
  const ptx = size("packages/ptx", /\.fatbin$/);
  assert.ok(ptx < 9_000_000, `packages/ptx is ${ptx} bytes`);
  const hip = size("packages/hip", /\.hsaco\.gz$/);
  assert.ok(hip < 9_000_000, `packages/hip is ${hip} bytes`);
});

/** The names of the defined global functions in an ELF64 (little-endian) file's .symtab. */
function elfFunctions(elf: Uint8Array): Set<string> {
  const v = new DataView(elf.buffer, elf.byteOffset, elf.byteLength);
  assert.deepEqual([...elf.subarray(0, 4)], [0x7f, 0x45, 0x4c, 0x46], "ELF magic");
  assert.equal(elf[4], 2, "ELF64");
  assert.equal(elf[5], 1, "little-endian");
  const shoff = Number(v.getBigUint64(0x28, true)),
    shentsize = v.getUint16(0x3a, true),
    shnum = v.getUint16(0x3c, true);
  const section = (i: number) => {
    const o = shoff + i * shentsize;
    return {
      type: v.getUint32(o + 4, true),
      offset: Number(v.getBigUint64(o + 0x18, true)),
      size: Number(v.getBigUint64(o + 0x20, true)),
      link: v.getUint32(o + 0x28, true),
    };
  };
  const SHT_SYMTAB = 2, STT_FUNC = 2, STB_GLOBAL = 1;
  const names = new Set<string>();
  for (let i = 0; i < shnum; i++) {
    const sh = section(i);
    if (sh.type !== SHT_SYMTAB) continue;
    const strtab = section(sh.link);
    for (let o = sh.offset; o < sh.offset + sh.size; o += 24) {
      const info = elf[o + 4], shndx = v.getUint16(o + 6, true);
      if ((info & 0xf) !== STT_FUNC || info >> 4 !== STB_GLOBAL || shndx === 0) continue;
      const start = strtab.offset + v.getUint32(o, true);
      names.add(new TextDecoder().decode(elf.subarray(start, elf.indexOf(0, start))));
    }
  }
  return names;
}

/** The forward kernels the plan names (kernel and vector-only variant) for a device of compute capability `cc`. */
function plannedForwardKernels(cc: [number, number]): Set<string> {
  const limits = planLimits({
    backend: "cuda",
    info: { ...FAKE_H200, computeCapability: cc, multiprocessors: cc[0] === 9 ? 132 : 108 },
  });
  const names = new Set<string>();
  const ds = [1, 3, 127, 128, 1000, 1024, 2048, 2049, 4096, 4097, 8192, 16384, 16385, 32768, 65537, 262144];
  for (const d of ds) {
    for (const tin of DTYPES) {
      for (const tout of DTYPES) {
        for (const tw of [undefined, "f32", tin] as const) {
          for (const kind of ["layer", "rms"] as const) {
            for (const rows of [1, 64, 100_000]) {
              const r = planNorm({ kind, rows, d, inputDtype: tin, outputDtype: tout, paramDtype: tw }, limits);
              if (!("plan" in r)) continue;
              names.add(r.plan.kernel);
              if (r.plan.fullKernel !== null) names.add(r.plan.fullKernel);
            }
          }
        }
      }
    }
  }
  return names;
}

/** The defined kernels of a one-entry SASS fatbin (its ELF symbol table). */
function sassFunctions(file: string): Set<string> {
  const bytes = read(file);
  const [e] = parseFatbin(bytes);
  const elf = new Uint8Array(zstdDecompressSync(bytes.subarray(e.offset, e.offset + e.size)));
  assert.equal(elf[18] | (elf[19] << 8), 190, "e_machine EM_CUDA");
  return elfFunctions(elf);
}

for (const [target, file, bwdFile] of [["sm_80", IMAGES[0], BWD_IMAGES[0]], ["sm_90", IMAGES[1], BWD_IMAGES[1]]]) {
  test(`the ${target} backward image defines every kernel of NORM_BWD_KERNELS, and no other`, () => {
    const funcs = sassFunctions(bwdFile);
    assert.deepEqual([...funcs].sort(), [...NORM_BWD_KERNELS].sort());
  });
  test(`the ${target} image defines every kernel of NORM_KERNELS and every forward plan's kernel (its ELF symbol table), and no other`, () => {
    const funcs = sassFunctions(file);
    const missing = NORM_KERNELS.filter((k) => !funcs.has(k));
    assert.deepEqual(missing, [], `${target} lacks ${missing.length} kernels`);
    // Every extern "C" kernel is in NORM_KERNELS (device functions are not global symbols of their own here).
    const extra = [...funcs].filter((f) => !NORM_KERNELS.includes(f));
    assert.deepEqual(extra, [], `${target} has kernels NORM_KERNELS does not list`);
    // And what the ops can name: every forward plan for a GPU this image serves.
    const planned = plannedForwardKernels(target === "sm_80" ? [8, 0] : [9, 0]);
    assert.ok(planned.size > 50, `${planned.size} planned kernels`);
    assert.deepEqual([...planned].filter((k) => !funcs.has(k)), [], `${target}: planned kernels missing`);
  });
}
