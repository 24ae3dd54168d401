/** Every error normkit throws on purpose has its own class, so callers can tell them apart. */

/**
 * Error codes after which the context is unusable: every later call on it returns the same error (CUDA's
 * "sticky" errors; HIP uses the same numbers for these). On the NVIDIA driver even a context reset does not
 * clear them: the process must be restarted. A faulting kernel (illegal address, trap/assert, misaligned
 * access, ...) leaves one behind; it surfaces at the next synchronizing call.
 */
export const STICKY_ERROR_CODES: ReadonlyMap<number, string> = new Map([
  [214, "ECC_UNCORRECTABLE"],
  [700, "ILLEGAL_ADDRESS"],
  [702, "LAUNCH_TIMEOUT"],
  [710, "ASSERT"],
  [714, "HARDWARE_STACK_ERROR"],
  [715, "ILLEGAL_INSTRUCTION"],
  [716, "MISALIGNED_ADDRESS"],
  [717, "INVALID_ADDRESS_SPACE"],
  [718, "INVALID_PC"],
  [719, "LAUNCH_FAILED"],
]);

/**
 * A driver call failed. `codeName` is the driver's own name, e.g. "CUDA_ERROR_OUT_OF_MEMORY". `sticky` is
 * true when the error left the context unusable (see STICKY_ERROR_CODES). On the NVIDIA driver (checked:
 * 580.159.04, H200) a sticky error cannot be cleared in-process: a primary-context reset returns success but
 * every later call (retain, alloc, synchronize) still fails, so the process must be restarted; run GPU work
 * that may fault in a child process if the parent has to survive it. `device.recover()` releases the device's
 * resources, tries the reset and, when the context stays unusable, throws a GpuError with `restartRequired`
 * and leaves the device refusing further use (`device.poisoned`).
 */
export class GpuError extends Error {
  /** "GpuError". */
  override name = "GpuError";
  /** True when the error left the context unusable: every later call on it fails (see STICKY_ERROR_CODES). */
  readonly sticky: boolean;
  /**
   * True when this process can no longer use the GPU at all (device.recover() found the context still
   * unusable after a reset, or the GPU was already found so): restart the process. Implies `sticky`.
   */
  readonly restartRequired: boolean;
  /**
   * Made by normkit when a driver call fails.
   * @param backend The backend whose driver failed.
   * @param call The call that failed, e.g. "cuMemAlloc".
   * @param code The driver's numeric error code.
   * @param codeName The driver's name for it, e.g. "CUDA_ERROR_OUT_OF_MEMORY".
   * @param description The driver's description of it.
   * @param opts.restartRequired The GPU cannot be used again in this process.
   */
  constructor(
    readonly backend: "cuda" | "hip",
    readonly call: string,
    readonly code: number,
    readonly codeName: string,
    readonly description: string,
    opts: { restartRequired?: boolean } = {},
  ) {
    const restartRequired = opts.restartRequired === true;
    const sticky = restartRequired || STICKY_ERROR_CODES.has(code);
    super(
      `${call} failed: ${codeName} (${code}): ${description}` +
        (restartRequired
          ? ". The context is unusable and in-process recovery is impossible with this driver: a context reset " +
            "did not clear the sticky error, so every CUDA/HIP call on this GPU in this process fails. The process " +
            "must be restarted (run GPU work that may fault in a child process to keep the parent alive)"
          : sticky
          ? ". The context is unusable (sticky error, usually a faulting kernel): every later call on it fails. " +
            "The NVIDIA driver cannot clear this in-process: the process must be restarted. device.recover() " +
            "releases the device's buffers, streams, events and modules and tries a context reset; it throws " +
            "(restartRequired) when the context stays unusable"
          : ""),
    );
    this.sticky = sticky;
    this.restartRequired = restartRequired;
  }
}

/** A bad argument: names the argument, what was expected and what was given. Nothing ran or was written. */
export class ArgumentError extends TypeError {
  /** "ArgumentError". */
  override name = "ArgumentError";
  /**
   * Made by normkit when it refuses an argument.
   * @param argument The argument (or option, or element of one) that was refused, e.g. "weight.dtype".
   * @param expected What it should have been.
   * @param got What was given (described briefly in the message).
   */
  constructor(readonly argument: string, readonly expected: string, got?: unknown) {
    super(`${argument}: expected ${expected}${got === undefined ? "" : `, got ${describe(got)}`}`);
  }
}

/** Use of an object after close()/dispose, or after its device was closed or recovered. */
export class DisposedError extends Error {
  /** "DisposedError". */
  override name = "DisposedError";
  /**
   * Made by normkit when a closed object is used.
   * @param what The object that was used, e.g. "DeviceBuffer(1024 bytes)".
   */
  constructor(readonly what: string) {
    super(`${what} has been closed (disposed) and cannot be used`);
  }
}

/** The requested backend cannot be used here; `reason` says why. */
export class BackendUnavailableError extends Error {
  /** "BackendUnavailableError". */
  override name = "BackendUnavailableError";
  /**
   * Made by Device.open() when the backend asked for cannot be used.
   * @param backend The backend asked for ("cuda" or "hip").
   * @param reason Why it cannot be used, e.g. no driver library or no device.
   */
  constructor(readonly backend: string, readonly reason: string) {
    super(`backend "${backend}" is unavailable: ${reason}`);
  }
}

/**
 * The operation exists, but not for this combination (dtype, backend, row length, …) or not in this state (a
 * synchronizing call while a stream captures, a GPU norm before loadKernels()). The message says which.
 */
export class UnsupportedError extends Error {
  /** "UnsupportedError". */
  override name = "UnsupportedError";
}

/** A short description of a bad value for a message: long strings and arrays are cut, objects named by their class. */
function describe(v: unknown): string {
  if (typeof v === "string") return JSON.stringify(v.length > 100 ? `${v.slice(0, 100)}…` : v);
  if (typeof v === "bigint") return `${v}n`;
  if (typeof v === "function") return "a function";
  if (typeof v === "symbol") return String(v);
  if (Array.isArray(v)) {
    const head = v.slice(0, 8).map((e) => (Array.isArray(e) ? "[…]" : describe(e)));
    return `[${head.join(", ")}${v.length > 8 ? `, … (${v.length} elements)` : ""}]`;
  }
  if (v === null || typeof v !== "object") return String(v);
  if (ArrayBuffer.isView(v) && "length" in v) {
    return `${v.constructor.name}(${(v as unknown as ArrayLike<unknown>).length})`;
  }
  return (v as object).constructor?.name ?? "object";
}

/** Device.open()'s sanity check (ones → LayerNorm 0, RMSNorm 1) got a wrong value: the norms cannot be trusted here. */
export class SanityCheckError extends Error {
  /** "SanityCheckError". */
  override name = "SanityCheckError";
  /**
   * Made by the sanity check.
   * @param op The op that gave a wrong value ("layerNorm" or "rmsNorm").
   * @param index The first wrong element.
   * @param expected The value it should have had.
   * @param got The value it had.
   * @param backend The device's backend, for the message.
   */
  constructor(
    readonly op: string,
    readonly index: number,
    readonly expected: number,
    readonly got: number,
    backend: string,
  ) {
    super(
      `sanity check failed on ${backend}: ${op} of all-ones gave ${got} at element ${index}, expected ${expected} ` +
        `(open with { sanityCheck: false } to skip it)`,
    );
  }
}
