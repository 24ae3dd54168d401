// Checks, without a GPU, that precompiled/norm_cuda.ts matches precompiled/ and kernels/.
// Runs under `deno test --allow-read tests/unit/precompiled.test.ts` and `bun test ./tests/unit/precompiled.test.ts`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Buffer } from "node:buffer";
import { gunzipSync } from "node:zlib";
import { decodeBase64 } from "../../runtime/base64.ts";
import {
  NORM_FATBIN,
  NORM_KERNELS,
  NORM_SOURCE_FILES,
  NORM_SOURCE_SHA256,
} from "../../precompiled/norm_cuda.ts";

const root = new URL("../../", import.meta.url);
const read = (rel: string): Uint8Array =>
  new Uint8Array(readFileSync(new URL(rel, root)));
const b64 = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, "base64"));

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

test("decodeBase64 (native and fallback) gives Buffer's bytes: random lengths 0–67 and the embedded fatbin", () => {
  let seed = 11;
  for (let n = 0; n < 68; n++) {
    const bytes = Uint8Array.from({ length: n }, () => (seed = (seed * 1103515245 + 12345) >>> 0) >>> 24);
    const s = Buffer.from(bytes).toString("base64");
    assert.deepEqual(decodeBase64(s), bytes, `native, ${n} bytes`);
    assert.deepEqual(decodeBase64(s, false), bytes, `fallback, ${n} bytes`);
  }
  const want = new Uint8Array(Buffer.from(NORM_FATBIN, "base64"));
  assert.deepEqual(decodeBase64(NORM_FATBIN), want);
  assert.deepEqual(decodeBase64(NORM_FATBIN, false), want);
});

test("scripts/fatbin.sh writes out exactly the fatbin NORM_FATBIN embeds (what the C benchmarks load)", () => {
  const dir = mkdtempSync(join(tmpdir(), "normkit-fatbin-"));
  try {
    const out = join(dir, "norm.fatbin");
    execFileSync("bash", [fileURLToPath(new URL("scripts/fatbin.sh", root)), out]);
    assert.deepEqual(new Uint8Array(readFileSync(out)), b64(NORM_FATBIN));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("PTX targets sm_80 and has an .entry for every kernel", () => {
  const ptx = new TextDecoder().decode(gunzipSync(read("precompiled/norm.ptx.gz")));
  assert.match(ptx, /^\.target sm_80$/m);
  assert.ok(NORM_KERNELS.length >= 3);
  for (const name of ["scale_f32"]) {
    assert.ok(NORM_KERNELS.includes(name), `NORM_KERNELS has ${name}`);
  }
  const entries = [...ptx.matchAll(/^\.visible \.entry (\w+)\(/gm)].map((m) =>
    m[1]
  );
  assert.deepEqual([...entries].sort(), [...NORM_KERNELS].sort());
});

// The fast forward kernels: kind x mapping x (input, output, weight/bias) dtype triple.
const FWD_TRIPLES = [
  "f32_f32_f32", "f32_f16_f32", "f32_bf16_f32",
  "f16_f32_f32", "f16_f16_f32", "f16_bf16_f32", "f16_f32_f16", "f16_f16_f16", "f16_bf16_f16",
  "bf16_f32_f32", "bf16_f16_f32", "bf16_bf16_f32", "bf16_f32_bf16", "bf16_f16_bf16", "bf16_bf16_bf16",
];
const FWD_KERNELS = FWD_TRIPLES.flatMap((t) =>
  ["ln", "rms"].flatMap((k) =>
    ["rows", "block", "cluster", "wide", "latency", "stash", ...(k === "ln" ? ["blockfull", "clusterfull", "rowstwopass", "rowstile"] : ["rowstile"])].map((m) => `nk_${k}_${m}_${t}`)
  )
);

// The backward kernels: kind x mapping x (x, dy, weight) dtype triple (the same 15 triples), then the finalize.
const BWD_KERNELS = FWD_TRIPLES.flatMap((t) =>
  ["ln", "rms"].flatMap((k) => ["cached", "wide", "rowsum", "tile", "cluster"].map((m) => `nk_${k}_bwd_${m}_${t}`))
);
// The bulk-staged backward kernels (sm_90): LayerNorm's one-row blocks and both kinds' clusters, for x and dy of one
// dtype (kernels/norm.cu, NK_BWD_STAGED_DTYPES).
const STAGED_KERNELS = ["f32_f32_f32", "f16_f16_f32", "f16_f16_f16", "bf16_bf16_f32", "bf16_bf16_bf16"].flatMap((t) =>
  [`nk_ln_bwd_cachedstaged_${t}`, `nk_ln_bwd_clusterstaged_${t}`, `nk_rms_bwd_clusterstaged_${t}`]
);
const DIAG_KERNELS = ["nk_diag_partial_f32", "nk_diag_partial_f16", "nk_diag_partial_bf16", "nk_diag_final"];
const FINALIZE_KERNELS = ["nk_bwd_finalize_f32", "nk_bwd_finalize_f16", "nk_bwd_finalize_bf16"];

test("NORM_KERNELS: scale_f32, the diagnostics, the finalize, then 255 forward, 150 backward and 15 staged backward kernels", () => {
  // 15 dtype triples × (LN: 6 mappings + blockfull, clusterfull, rowstwopass, rowstile; RMS: 6 mappings + rowstile).
  assert.equal(FWD_KERNELS.length, 255);
  assert.equal(BWD_KERNELS.length, 150);
  assert.equal(STAGED_KERNELS.length, 15);
  assert.deepEqual([...NORM_KERNELS], ["scale_f32", ...DIAG_KERNELS, ...FINALIZE_KERNELS, ...FWD_KERNELS, ...BWD_KERNELS, ...STAGED_KERNELS]);
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

test("fatbin: magic 0xBA55ED50 (LE), SASS sm_80 + sm_90, PTX compute_90", () => {
  const bytes = b64(NORM_FATBIN);
  assert.deepEqual([...bytes.subarray(0, 4)], [0x50, 0xed, 0x55, 0xba]);
  const entries = parseFatbin(bytes);
  const elfArchs = entries.filter((e) => e.kind === KIND_ELF).map((e) => e.arch)
    .sort();
  const ptxArchs = entries.filter((e) => e.kind === KIND_PTX).map((e) => e.arch)
    .sort();
  assert.deepEqual(elfArchs, [80, 90]);
  assert.deepEqual(ptxArchs, [90]);
  // Every entry is compressed (-Xfatbin -compress-all): the kernels inside are checked on the GPU
  // host, where tests/gpu/runtime_and_ops.test.ts looks up every name in NORM_KERNELS in the loaded module.
  for (const e of entries) assert.notEqual(e.flags & FLAG_COMPRESSED, 0n, `entry arch ${e.arch} kind ${e.kind} is compressed`);
});

test("the images' base64 lives in JSON modules, the .ts modules stay small (a 9 MB string in a .ts module imported 5x slower)", () => {
  // bench/import_time.ts, 2026-12-03, a 2-core VM: import of mod.ts under Deno 322 ms with the fatbin string in
  // norm_cuda.ts, 61 ms with it in norm_fatbin.json; Bun 100 → 80 ms.
  for (const [ts, json] of [["precompiled/norm_cuda.ts", "norm_fatbin.json"], ["precompiled/norm_hip.ts", "norm_hsaco.json"]]) {
    const src = new TextDecoder().decode(read(ts));
    assert.ok(src.length < 64 * 1024, `${ts} is ${src.length} bytes`);
    assert.match(src, new RegExp(`^import \\w+ from "\\./${json.replace(".", "\\.")}" with \\{ type: "json" \\};$`, "m"));
  }
  assert.equal(typeof JSON.parse(new TextDecoder().decode(read("precompiled/norm_fatbin.json"))), "string");
  const hsaco = JSON.parse(new TextDecoder().decode(read("precompiled/norm_hsaco.json")));
  assert.deepEqual(Object.keys(hsaco), ["gfx90a", "gfx942", "gfx1100"]);
});
