/** The Bun side of the FFI: bun:ffi. */
import { CString, dlopen, ptr, toArrayBuffer } from "bun:ffi";
import { Buffer } from "node:buffer";
import { readFile } from "node:fs/promises";
import type { FfiRuntime, NativeLibrary, NativeType, SymbolTable } from "./types.ts";

const BUN_TYPE: Record<NativeType, string> = {
  void: "void", i32: "i32", u32: "u32", i64: "i64", u64: "u64", f32: "f32", f64: "f64", buffer: "ptr",
};

export const bunFfi: FfiRuntime = {
  name: "bun",
  readFile: async (url) => {
    const b = await readFile(url);
    return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  },
  decodeBase64: (s) => {
    const b = Buffer.from(s, "base64");
    // A plain Uint8Array over the same bytes (large buffers are not pooled: the view starts at 0).
    return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  },
  open<T extends SymbolTable>(path: string, table: T): NativeLibrary<T> {
    const defs: Record<string, { args: string[]; returns: string }> = {};
    for (const [name, s] of Object.entries(table)) {
      defs[name] = { args: s.parameters.map((t) => BUN_TYPE[t]), returns: BUN_TYPE[s.result] };
    }
    // deno-lint-ignore no-explicit-any
    const lib = dlopen(path, defs as any);
    // deno-lint-ignore no-explicit-any
    return { path, symbols: lib.symbols as any, close: () => lib.close() };
  },
  addressOf(view: ArrayBufferView): bigint {
    // JSC keeps small typed arrays in its GC heap and moves their bytes out the first time their
    // ArrayBuffer is materialized: an address taken before that would dangle. Touch .buffer first.
    void view.buffer;
    return BigInt(ptr(view));
  },
  readCString(addr: bigint): string {
    // deno-lint-ignore no-explicit-any
    return String(new CString(Number(addr) as any));
  },
  viewMemory(addr: bigint, bytes: number): ArrayBuffer {
    // deno-lint-ignore no-explicit-any
    return toArrayBuffer(Number(addr) as any, 0, bytes);
  },
  env(name: string): string | undefined {
    return process.env[name];
  },
  ffiAllowed(): boolean {
    return true;
  },
};
