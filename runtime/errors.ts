/** Every error normkit throws on purpose has its own class, so callers can tell them apart. */

/** A driver call failed. `codeName` is the driver's own name, e.g. "CUDA_ERROR_OUT_OF_MEMORY". */
export class GpuError extends Error {
  override name = "GpuError";
  constructor(
    readonly backend: "cuda" | "hip",
    readonly call: string,
    readonly code: number,
    readonly codeName: string,
    readonly description: string,
  ) {
    super(`${call} failed: ${codeName} (${code}): ${description}`);
  }
}

/** A bad argument: names the argument, what was expected and what was given. Nothing ran or was written. */
export class ArgumentError extends TypeError {
  override name = "ArgumentError";
  constructor(readonly argument: string, readonly expected: string, got?: unknown) {
    super(`${argument}: expected ${expected}${got === undefined ? "" : `, got ${describe(got)}`}`);
  }
}

/** Use of an object after close()/dispose. */
export class DisposedError extends Error {
  override name = "DisposedError";
  constructor(readonly what: string) {
    super(`${what} has been closed (disposed) and cannot be used`);
  }
}

/** The requested backend cannot be used here; `reason` says why. */
export class BackendUnavailableError extends Error {
  override name = "BackendUnavailableError";
  constructor(readonly backend: string, readonly reason: string) {
    super(`backend "${backend}" is unavailable: ${reason}`);
  }
}

/** The operation exists, but not for this combination (dtype, backend, …). */
export class UnsupportedError extends Error {
  override name = "UnsupportedError";
}

function describe(v: unknown): string {
  if (typeof v === "string") return JSON.stringify(v);
  if (typeof v === "bigint") return `${v}n`;
  if (Array.isArray(v)) return `[${v.map(describe).join(", ")}]`;
  if (v === null || typeof v !== "object") return String(v);
  return (v as object).constructor?.name ?? "object";
}
