/**
 * Ownership of native resources.
 *
 * Each native resource is released exactly once, by whichever comes first: its own close() (or `using`),
 * its owner closing (a Device closes what it created before releasing its context), or — only as a safety
 * net for forgotten objects — the garbage collector. An Owner keeps the release functions, not the objects,
 * so a forgotten object can still be collected.
 */
import { DisposedError } from "./errors.ts";

// Releases so far, of every owner: while it has not moved, nothing has been closed or released since, so a
// caller that validated objects at some count can skip checking them again (ops/norm.ts's repeated calls).
let releases = 0;
/** How many native resources have been released so far, by any owner (it only grows). */
export function releaseCount(): number {
  return releases;
}

export class Owner {
  #next = 1;
  #live = new Map<number, () => void>();

  adopt(release: () => void): number {
    const id = this.#next++;
    this.#live.set(id, release);
    return id;
  }

  /** Runs the release for `id` if it has not run yet. */
  release(id: number): void {
    const fn = this.#live.get(id);
    if (!fn) return;
    this.#live.delete(id);
    releases++;
    fn();
  }

  /** Releases everything still live, newest first; the first error is rethrown after all have run. */
  releaseAll(): void {
    let first: unknown;
    for (const id of [...this.#live.keys()].reverse()) {
      try {
        this.release(id);
      } catch (e) {
        first ??= e;
      }
    }
    if (first !== undefined) throw first;
  }

  /** False once `id` was released (by its object, the owner's releaseAll or the collector). */
  isLive(id: number): boolean {
    return this.#live.has(id);
  }

  /** How many resources are still live (for leak checks). */
  get liveCount(): number {
    return this.#live.size;
  }
}

const collected = new FinalizationRegistry<{ owner: Owner; id: number }>(({ owner, id }) => {
  try {
    owner.release(id);
  } catch {
    // A finalizer has nowhere to report to; the owner's releaseAll would have reported it.
  }
});

/**
 * Base of every object that owns a native resource (Device, DeviceBuffer, PinnedBuffer, Stream, Event, Module,
 * Graph, GraphExec): idempotent close(), `using`, and DisposedError on use after close. Closing a Device closes
 * everything made from it. An object that is never closed is released when it is garbage-collected, as a
 * safety net only: close what you make (or declare it with `using`).
 */
export abstract class Resource implements Disposable {
  #owner: Owner;
  #id: number;
  #closed = false;
  #parent: Resource | null;

  /** `parent` (the Device) closing makes this object unusable too. */
  protected constructor(owner: Owner, release: () => void, parent: Resource | null) {
    this.#owner = owner;
    this.#parent = parent;
    this.#id = owner.adopt(release);
    collected.register(this, { owner, id: this.#id }, this);
  }

  /** A short description for error messages, e.g. "DeviceBuffer(1024 bytes)". */
  protected abstract get label(): string;

  /** True after close(), after the parent (the Device) closed, or after the owner released it (device.recover()). */
  get closed(): boolean {
    return this.#closed || !this.#owner.isLive(this.#id) || (this.#parent?.closed ?? false);
  }

  /** A short description, e.g. "Device(cuda:0)" or "DeviceBuffer(1024 bytes), closed" (what console.log prints). */
  toString(): string {
    return this.closed ? `${this.label}, closed` : this.label;
  }

  /** Deno's console.log / Deno.inspect: the short description (not every field, nor the whole Device). */
  [Symbol.for("Deno.customInspect")](): string {
    return this.toString();
  }

  /** Node's and Bun's console.log / util.inspect: the short description (not every field, nor the whole Device). */
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }

  /** Releases the resource now. Safe to call more than once. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    collected.unregister(this);
    this.#owner.release(this.#id);
  }

  /** close(), for `using` declarations. */
  [Symbol.dispose](): void {
    this.close();
  }

  /** Throws DisposedError when closed, or when the owner (e.g. the Device) released it. */
  protected assertOpen(): void {
    const why = this.closedBecause();
    if (why !== undefined) throw new DisposedError(`${this.label}${why}`);
  }

  /**
   * Why the resource cannot be used, as a DisposedError message's tail: "" when closed itself, " (its device was
   * closed)" or " (released by device.recover())" when its owner released it; undefined while open. An object over
   * this resource (a Tensor over its buffer) names itself with this reason.
   */
  closedBecause(): string | undefined {
    if (this.#closed) return "";
    if (this.#parent?.closed) return " (its device was closed)";
    if (!this.#owner.isLive(this.#id)) return " (released by device.recover())";
    return undefined;
  }
}
