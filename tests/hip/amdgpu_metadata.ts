/**
 * Reading AMD code objects without a GPU, for the ABI tests (tests/hip/*hsaco_abi.test.ts): the AMDGPU metadata note
 * of an ELF code object, and the C layout of explicit kernel arguments.
 */
import assert from "node:assert/strict";
import { decode } from "@msgpack/msgpack";
export { cLayout } from "../fixtures/fatbin.ts";

/** The fields of one kernel's metadata the tests read. */
export interface KernelMeta {
  ".name": string;
  ".args": { ".offset": number; ".size": number; ".value_kind": string }[];
  ".group_segment_fixed_size": number;
  ".private_segment_fixed_size": number;
  ".wavefront_size": number;
  ".max_flat_workgroup_size": number;
  ".kernarg_segment_size": number;
  ".vgpr_count": number;
  ".vgpr_spill_count": number;
  ".sgpr_count": number;
  ".sgpr_spill_count": number;
}

/** The AMDGPU metadata (msgpack in an NT_AMDGPU_METADATA note owned by "AMDGPU") of an ELF code object. */
export function metadata(elf: Uint8Array): { "amdhsa.kernels": KernelMeta[]; "amdhsa.target": string } {
  const v = new DataView(elf.buffer, elf.byteOffset, elf.byteLength);
  assert.deepEqual([...elf.subarray(0, 4)], [0x7f, 0x45, 0x4c, 0x46], "ELF magic");
  assert.equal(elf[4], 2, "64-bit ELF");
  const shoff = Number(v.getBigUint64(0x28, true)),
    shentsize = v.getUint16(0x3a, true),
    shnum = v.getUint16(0x3c, true);
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
