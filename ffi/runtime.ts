/**
 * Picks the FFI implementation for the running JavaScript runtime, once, at import.
 * Bun's module is loaded only under Bun ("bun:ffi" does not exist elsewhere), through a dynamic import
 * whose specifier is not a literal so that Deno's module graph never tries to resolve it.
 */
import type { FfiRuntime } from "./types.ts";
import { denoFfi } from "./deno.ts";

async function detect(): Promise<FfiRuntime | null> {
  const g = globalThis as { Deno?: unknown; Bun?: unknown };
  if (g.Deno) return denoFfi;
  if (g.Bun) {
    const bunModule = "./bun.ts";
    return ((await import(bunModule)) as { bunFfi: FfiRuntime }).bunFfi;
  }
  return null;
}

/** The FFI of this runtime, or null (e.g. Node.js, a browser): then only the CPU backend is available. */
export const ffi: FfiRuntime | null = await detect();
