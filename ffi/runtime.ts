/**
 * Picks the FFI implementation for the running JavaScript runtime, once, at import.
 * Both implementations are imported statically (literal specifiers that Deno, JSR and bundlers follow); each
 * touches its runtime's FFI only when used, so importing ffi/bun.ts under Deno loads nothing of Bun's.
 */
import type { FfiRuntime } from "./types.ts";
import { denoFfi } from "./deno.ts";
import { bunFfi } from "./bun.ts";

function detect(): FfiRuntime | null {
  const g = globalThis as { Deno?: unknown; Bun?: unknown };
  if (g.Deno) return denoFfi;
  if (g.Bun) return bunFfi;
  return null;
}

/** The FFI of this runtime, or null (e.g. Node.js, a browser): then only the CPU backend is available. */
export const ffi: FfiRuntime | null = detect();
