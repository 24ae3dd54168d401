/**
 * ABI check of the AMD code objects, no GPU needed: for every kernel of every HSACO, the AMDGPU metadata
 * note (ELF note, msgpack) must agree with what the TypeScript launcher packs (argument offsets and
 * sizes), the wave size the plan assumes, and the launch limits the plan may use.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { decode } from "@msgpack/msgpack";
import { NORM_HSACO, HSACO_SOURCE_SHA256 } from "../precompiled/norm_hip.ts";
import { NORM_KERNELS, NORM_SOURCE_FILES } from "../precompiled/norm_cuda.ts";
import { NORM_FWD_ARGS } from "../ops/kernels.ts";
import type { ArgType } from "../runtime/module.ts";
import { MAX_BLOCK_THREADS, planNorm, ROWS_BLOCK } from "../ops/plan.ts";

const read = (p: string): Uint8Array => new Uint8Array(readFileSync(new URL(`../${p}`, import.meta.url)));
const b64 = (s: string): Uint8Array => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
const WAVE: Record<string, number> = { gfx90a: 64, gfx942: 64, gfx1100: 32 };
const LDS_BYTES = 65536; // per workgroup on gfx9 and gfx11

interface KernelMeta {
  ".name": string;
  ".args": { ".offset": number; ".size": number; ".value_kind": string }[];
  ".group_segment_fixed_size": number;
  ".wavefront_size": number;
  ".max_flat_workgroup_size": number;
}

/** The AMDGPU metadata (msgpack in an NT_AMDGPU_METADATA note owned by "AMDGPU") of an ELF code object. */
function metadata(elf: Uint8Array): { "amdhsa.kernels": KernelMeta[]; "amdhsa.target": string } {
  const v = new DataView(elf.buffer, elf.byteOffset, elf.byteLength);
  assert.deepEqual([...elf.subarray(0, 4)], [0x7f, 0x45, 0x4c, 0x46], "ELF magic");
  assert.equal(elf[4], 2, "64-bit ELF");
  const shoff = Number(v.getBigUint64(0x28, true)), shentsize = v.getUint16(0x3a, true), shnum = v.getUint16(0x3c, true);
  for (let i = 0; i < shnum; i++) {
    const sh = shoff + i * shentsize;
    if (v.getUint32(sh + 4, true) !== 7) continue; // SHT_NOTE
    let off = Number(v.getBigUint64(sh + 0x18, true));
    const end = off + Number(v.getBigUint64(sh + 0x20, true));
    while (off < end) {
      const namesz = v.getUint32(off, true), descsz = v.getUint32(off + 4, true), type = v.getUint32(off + 8, true);
      const name = new TextDecoder().decode(elf.subarray(off + 12, off + 12 + namesz - 1));
      const desc = off + 12 + ((namesz + 3) & ~3);
      if (name === "AMDGPU" && type === 32) return decode(elf.subarray(desc, desc + descsz)) as never;
      off = desc + ((descsz + 3) & ~3);
    }
  }
  throw new Error("no AMDGPU metadata note");
}

/** Offsets and sizes of explicit arguments as a C compiler lays them out (natural alignment). */
function cLayout(types: readonly ArgType[]): { offset: number; size: number }[] {
  let off = 0;
  return types.map((t) => {
    const size = t === "ptr" || t === "i64" || t === "u64" || t === "f64" ? 8 : 4;
    off = Math.ceil(off / size) * size;
    const r = { offset: off, size };
    off += size;
    return r;
  });
}

const SCALE_ARGS: ArgType[] = ["ptr", "ptr", "f32", "i64"];

test("NORM_HSACO holds ELF code objects for gfx90a, gfx942, gfx1100, built from the current sources", () => {
  assert.deepEqual(Object.keys(NORM_HSACO).sort(), ["gfx1100", "gfx90a", "gfx942"]);
  for (const [arch, data] of Object.entries(NORM_HSACO)) {
    const elf = b64(data);
    assert.deepEqual([...elf.subarray(0, 4)], [0x7f, 0x45, 0x4c, 0x46], `${arch}: ELF`);
    assert.equal(elf[18] | (elf[19] << 8), 224, `${arch}: e_machine EM_AMDGPU`);
  }
  const h = createHash("sha256");
  for (const f of NORM_SOURCE_FILES) h.update(read(f));
  assert.equal(h.digest("hex"), HSACO_SOURCE_SHA256, "kernels/ changed: run bash scripts/build-hsaco.sh");
});

for (const arch of ["gfx90a", "gfx942", "gfx1100"]) {
  test(`${arch}: every kernel present; argument offsets/sizes = the launcher's packing; wave ${WAVE[arch]}; launch limits fit`, () => {
    const md = metadata(b64(NORM_HSACO[arch]));
    assert.match(md["amdhsa.target"], new RegExp(`amdgcn-amd-amdhsa--${arch}`));
    const byName = new Map(md["amdhsa.kernels"].map((k) => [k[".name"], k]));
    assert.deepEqual([...byName.keys()].sort(), [...NORM_KERNELS].sort(), "the same kernels as the CUDA build");
    for (const name of NORM_KERNELS) {
      const k = byName.get(name)!;
      const explicit = k[".args"].filter((a) => !a[".value_kind"].startsWith("hidden_"));
      const want = cLayout(name === "scale_f32" ? SCALE_ARGS : NORM_FWD_ARGS);
      assert.deepEqual(explicit.map((a) => ({ offset: a[".offset"], size: a[".size"] })), want, `${arch} ${name} arguments`);
      assert.equal(k[".wavefront_size"], WAVE[arch], `${arch} ${name} wave size`);
      if (name === "scale_f32") continue;
      const mapping = name.split("_")[2];
      // The most threads and dynamic LDS the plan may launch this mapping with.
      const threads = mapping === "rows" ? ROWS_BLOCK : mapping === "wide" ? 1024 : MAX_BLOCK_THREADS;
      const dynLds = mapping === "rows" ? 0 : 2 * Math.ceil(threads / WAVE[arch]) * 4 + (mapping === "cluster" ? 16 : 0);
      assert.ok(threads <= k[".max_flat_workgroup_size"], `${arch} ${name}: ${threads} threads > ${k[".max_flat_workgroup_size"]}`);
      assert.ok(k[".group_segment_fixed_size"] + dynLds <= LDS_BYTES, `${arch} ${name}: LDS`);
    }
  });

  test(`${arch}: the plan with wave ${WAVE[arch]} and no clusters launches within the code object's limits`, () => {
    const md = metadata(b64(NORM_HSACO[arch]));
    const byName = new Map(md["amdhsa.kernels"].map((k) => [k[".name"], k]));
    for (const d of [1, 3, 127, 128, 1000, 1024, 2048, 4096, 4097, 8192, 12288, 32768, 65537, 262144]) {
      for (const dtype of ["f32", "bf16"] as const) {
        for (const kind of ["layer", "rms"] as const) {
          const r = planNorm({ kind, rows: 1000, d, inputDtype: dtype, outputDtype: dtype }, {
            maxGridX: 2147483647, maxThreadsPerBlock: 1024, warpSize: WAVE[arch], ccMajor: 0,
          });
          assert.ok("plan" in r);
          const p = r.plan;
          assert.notEqual(p.mapping, "cluster", "no clusters on AMD");
          const k = byName.get(p.kernel)!;
          assert.ok(p.block[0] <= k[".max_flat_workgroup_size"] && p.block[0] % WAVE[arch] === 0 || p.mapping === "rows", `${arch} ${p.kernel} block ${p.block[0]}`);
          assert.ok(k[".group_segment_fixed_size"] + p.sharedBytes <= LDS_BYTES);
          if (p.mapping === "rows") assert.ok(p.tpr <= 32, "rows mapping reduces within 32-lane groups");
        }
      }
    }
  });
}
