/**
 * Base64 to bytes, for the embedded kernel images (precompiled/). The runtime's own fast decoder where it has one
 * (FfiRuntime.decodeBase64: Bun's Buffer), else Uint8Array.fromBase64 where the runtime has it (Deno 2.9 and Bun
 * 1.4 do), else atob and a loop. Not `Uint8Array.from(atob(s), mapFn)`: with a callback per byte it took 0.9–1.1 s
 * under Deno and 0.2 s under Bun for the 5.6 MB fatbin, most of Deno's Device.open (bench/RESULTS.md, cold start);
 * fromBase64 takes 2–57 ms, the loop 20–90 ms.
 */
import { ffi } from "../ffi/runtime.ts";

// deno-lint-ignore no-explicit-any
const fromBase64 = (Uint8Array as any).fromBase64 as ((s: string) => Uint8Array) | undefined;
const native: ((s: string) => Uint8Array) | undefined = ffi?.decodeBase64 ?? fromBase64;

/** The bytes `s` encodes (standard alphabet, padded). `useNative: false` takes the fallback (for tests). */
export function decodeBase64(s: string, useNative = true): Uint8Array {
  if (useNative && typeof native === "function") return native(s);
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
