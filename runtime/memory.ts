/**
 * Memory: DeviceBuffer (device memory; plain host bytes on the CPU backend) and PinnedBuffer (page-locked
 * host memory, needed for truly asynchronous copies).
 *
 * Copies are queued on a stream (default: the device's), so they are ordered with kernels on that stream:
 * - write() from ordinary (pageable) JS memory returns once the bytes are on the device (it synchronizes
 *   the stream: the driver may finish pageable copies asynchronously, and JS may move on or free the source);
 * - read() into ordinary JS memory returns once the bytes have arrived (after earlier work on the stream;
 *   it synchronizes the stream, as the driver does not promise that for pageable memory);
 * - writeAsync()/readAsync() with a PinnedBuffer return immediately: keep the PinnedBuffer untouched
 *   until the stream (or an event recorded after the copy) has completed.
 */
import { ffi } from "../ffi/runtime.ts";
import type { Device } from "./device.ts";
import { ArgumentError } from "./errors.ts";
import { Resource } from "./resource.ts";
import { Stream } from "./stream.ts";
import { checkOptionKeys, optionKeys, STREAM_KEYS } from "./options.ts";

const COPY_KEYS = optionKeys("offset", "stream");
const ASYNC_COPY_KEYS = optionKeys("offset", "stream", "pinnedOffset", "bytes");
const COPY_FROM_KEYS = optionKeys("offset", "stream", "srcOffset", "bytes");

/** Options of DeviceBuffer.write(), read() and copyFrom(). */
export interface CopyOptions {
  /** Byte offset into this buffer. */
  offset?: number;
  /** The stream the copy is ordered on (default: the device's stream). */
  stream?: Stream;
}

/** Options of DeviceBuffer.writeAsync() and readAsync(). */
export interface AsyncCopyOptions extends CopyOptions {
  /** Byte offset into the pinned buffer. */
  pinnedOffset?: number;
  /** Bytes to copy (default: the rest of the pinned buffer). */
  bytes?: number;
}

function checkRange(argument: string, offset: number, bytes: number, size: number): void {
  if (!Number.isSafeInteger(offset) || offset < 0) {
    throw new ArgumentError(`${argument} offset`, "an integer ≥ 0", offset);
  }
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new ArgumentError(`${argument} bytes`, "an integer ≥ 0", bytes);
  if (offset + bytes > size) {
    throw new ArgumentError(argument, `a range inside ${size} bytes`, `${bytes} bytes at offset ${offset}`);
  }
}

function bytesOf(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/**
 * Memory on a device; plain host bytes on the CPU backend. Made by `device.alloc(bytes)`; a Tensor is a typed
 * view of one (`tensor.buffer`). Every method throws DisposedError once it (or its device) is closed, and
 * ArgumentError for a range outside the buffer or a stream of another device.
 *
 * @example Round trip through device memory
 * ```ts
 * import { Device } from "@normkit/normkit/gpu";
 * using dev = Device.open();
 * using buf = dev.alloc(4 * 1024);
 * buf.write(new Float32Array(1024).fill(1));
 * const back = new Float32Array(1024);
 * buf.read(back);
 * ```
 */
export class DeviceBuffer extends Resource {
  /** The device the memory is on. */
  readonly device: Device;
  /** The size in bytes. */
  readonly byteLength: number;
  readonly #ptr: bigint;
  /** CPU backend: the bytes themselves. */
  readonly #host: Uint8Array | null;
  readonly #wrapped: boolean;

  /** @internal use device.alloc(), device.wrapPointer() or device.wrapHost() */
  constructor(
    device: Device,
    byteLength: number,
    ptr: bigint,
    host: Uint8Array | null,
    release: () => void,
    wrapped = false,
  ) {
    super(device.owner, release, device);
    this.device = device;
    this.byteLength = byteLength;
    this.#ptr = ptr;
    this.#host = host;
    this.#wrapped = wrapped;
  }

  /** "DeviceBuffer(N bytes)", for error messages. */
  protected get label(): string {
    return `DeviceBuffer(${this.byteLength} bytes on ${this.device.id}${this.#wrapped ? ", wrapped" : ""})`;
  }

  /** True for memory made by other code and wrapped (device.wrapPointer(), device.wrapHost()). */
  get wrapped(): boolean {
    return this.#wrapped;
  }

  /**
   * @internal Where `byteOffset` of this buffer lies in absolute terms: the address space (the host ArrayBuffer on
   * the CPU backend, null for the process's device address space) and the address in it. Two buffers over the
   * same memory (two wrappers of one allocation, or views of one ArrayBuffer) give the same answer, so overlap
   * checks compare these, never buffer objects.
   */
  addressOf(byteOffset: number): { space: ArrayBufferLike | null; address: bigint } {
    this.assertOpen();
    const h = this.#host;
    return h
      ? { space: h.buffer, address: BigInt(h.byteOffset + byteOffset) }
      : { space: null, address: this.#ptr + BigInt(byteOffset) };
  }

  /** True for a DeviceBuffer made by this class (not a Proxy of one, nor an object that only looks like one). */
  static isBuffer(v: unknown): v is DeviceBuffer {
    return typeof v === "object" && v !== null && #ptr in v;
  }

  /** A given stream must belong to this buffer's device and be open. */
  #checkStream(stream: Stream | undefined): void {
    if (stream === undefined) return;
    if (!Stream.isStream(stream) || stream.device !== this.device) {
      throw new ArgumentError("stream", `a Stream of the buffer's device (${this.device.id})`, stream);
    }
    void stream.handle; // throws DisposedError when closed
  }

  /** The device address (CUdeviceptr). On the CPU backend: 0n. */
  get ptr(): bigint {
    this.assertOpen();
    return this.#ptr;
  }

  /** CPU backend only: the bytes themselves (no copy). Throws ArgumentError for a buffer on a GPU. */
  get hostBytes(): Uint8Array {
    this.assertOpen();
    if (!this.#host) throw new ArgumentError("buffer", "a buffer of the CPU backend (this one is on the GPU)");
    return this.#host;
  }

  /**
   * Copies `src` into this buffer at `opts.offset` (bytes, default 0), ordered on `opts.stream`. The source may
   * be reused as soon as this returns (it synchronizes the stream).
   *
   * @throws {ArgumentError} when the bytes do not fit at the offset.
   * @throws {UnsupportedError} while the stream captures (use writeAsync from a PinnedBuffer).
   */
  write(src: ArrayBufferView, opts: CopyOptions = {}): void {
    checkOptionKeys(opts, COPY_KEYS);
    const offset = opts.offset ?? 0;
    checkRange("write", offset, src.byteLength, this.byteLength);
    this.#checkStream(opts.stream);
    const d = this.device.activeDriver;
    if (!d) return this.hostBytes.set(bytesOf(src), offset);
    const stream = opts.stream ?? this.device.stream;
    stream.assertNotCapturing("DeviceBuffer.write from JS memory (synchronous; use writeAsync from a PinnedBuffer)");
    if (src.byteLength === 0) return;
    d.copyHtoDAsync(this.ptr + BigInt(offset), ffi!.addressOf(src), src.byteLength, stream.handle);
    d.streamSynchronize(stream.handle);
  }

  /**
   * Copies `dst.byteLength` bytes from this buffer (at `opts.offset`, default 0) into `dst`, after earlier work
   * on the stream; they have arrived when this returns.
   *
   * @throws {ArgumentError} when the range is outside the buffer.
   * @throws {UnsupportedError} while the stream captures (use readAsync into a PinnedBuffer).
   */
  read(dst: ArrayBufferView, opts: CopyOptions = {}): void {
    checkOptionKeys(opts, COPY_KEYS);
    const offset = opts.offset ?? 0;
    checkRange("read", offset, dst.byteLength, this.byteLength);
    this.#checkStream(opts.stream);
    const d = this.device.activeDriver;
    if (!d) return bytesOf(dst).set(this.hostBytes.subarray(offset, offset + dst.byteLength));
    const stream = opts.stream ?? this.device.stream;
    stream.assertNotCapturing("DeviceBuffer.read into JS memory (synchronous; use readAsync into a PinnedBuffer)");
    if (dst.byteLength === 0) return;
    d.copyDtoHAsync(ffi!.addressOf(dst), this.ptr + BigInt(offset), dst.byteLength, stream.handle);
    d.streamSynchronize(stream.handle);
  }

  /**
   * Queues an upload from pinned memory; returns at once. Leave `src` untouched until the stream (or an event
   * recorded after the copy) has completed. Throws ArgumentError when a range is outside either buffer.
   */
  writeAsync(src: PinnedBuffer, opts: AsyncCopyOptions = {}): void {
    checkOptionKeys(opts, ASYNC_COPY_KEYS);
    const { offset = 0, pinnedOffset = 0 } = opts;
    const bytes = opts.bytes ?? src.byteLength - pinnedOffset;
    checkRange("writeAsync source", pinnedOffset, bytes, src.byteLength);
    checkRange("writeAsync", offset, bytes, this.byteLength);
    this.#checkStream(opts.stream);
    const d = this.device.activeDriver;
    if (!d) return this.hostBytes.set(src.bytes.subarray(pinnedOffset, pinnedOffset + bytes), offset);
    const stream = opts.stream ?? this.device.stream;
    if (bytes === 0) return;
    d.copyHtoDAsync(this.ptr + BigInt(offset), src.address + BigInt(pinnedOffset), bytes, stream.handle);
  }

  /**
   * Queues a download into pinned memory; returns at once. The bytes are in `dst` once the stream (or an event
   * recorded after the copy) has completed. Throws ArgumentError when a range is outside either buffer.
   */
  readAsync(dst: PinnedBuffer, opts: AsyncCopyOptions = {}): void {
    checkOptionKeys(opts, ASYNC_COPY_KEYS);
    const { offset = 0, pinnedOffset = 0 } = opts;
    const bytes = opts.bytes ?? dst.byteLength - pinnedOffset;
    checkRange("readAsync destination", pinnedOffset, bytes, dst.byteLength);
    checkRange("readAsync", offset, bytes, this.byteLength);
    this.#checkStream(opts.stream);
    const d = this.device.activeDriver;
    if (!d) return dst.bytes.set(this.hostBytes.subarray(offset, offset + bytes), pinnedOffset);
    const stream = opts.stream ?? this.device.stream;
    if (bytes === 0) return;
    d.copyDtoHAsync(dst.address + BigInt(pinnedOffset), this.ptr + BigInt(offset), bytes, stream.handle);
  }

  /**
   * Queues a device-to-device copy of `opts.bytes` (default: the rest of `src`) from `src` at `opts.srcOffset`
   * into this buffer at `opts.offset`. Throws ArgumentError for ranges outside the buffers, a buffer of another
   * device, or overlapping ranges of one buffer.
   */
  copyFrom(src: DeviceBuffer, opts: CopyOptions & { srcOffset?: number; bytes?: number } = {}): void {
    checkOptionKeys(opts, COPY_FROM_KEYS);
    const { offset = 0, srcOffset = 0 } = opts;
    const bytes = opts.bytes ?? src.byteLength - srcOffset;
    checkRange("copyFrom source", srcOffset, bytes, src.byteLength);
    checkRange("copyFrom", offset, bytes, this.byteLength);
    if (src.device !== this.device) throw new ArgumentError("copyFrom source", "a buffer of the same device");
    const from = src.addressOf(srcOffset), to = this.addressOf(offset), n = BigInt(bytes);
    if (from.space === to.space && bytes > 0 && to.address < from.address + n && from.address < to.address + n) {
      throw new ArgumentError(
        "copyFrom",
        "source and destination ranges that do not overlap",
        `[${srcOffset}, +${bytes}) → [${offset}, +${bytes})`,
      );
    }
    this.#checkStream(opts.stream);
    const d = this.device.activeDriver;
    if (!d) return this.hostBytes.set(src.hostBytes.subarray(srcOffset, srcOffset + bytes), offset);
    const stream = opts.stream ?? this.device.stream;
    if (bytes === 0) return;
    d.copyDtoD(this.ptr + BigInt(offset), src.ptr + BigInt(srcOffset), bytes, stream.handle);
  }

  /** Queues filling the whole buffer with the byte `value` (0–255; anything else is an ArgumentError). */
  fill(value: number, opts: { stream?: Stream } = {}): void {
    checkOptionKeys(opts, STREAM_KEYS);
    if (!Number.isInteger(value) || value < 0 || value > 255) throw new ArgumentError("value", "a byte 0–255", value);
    this.#checkStream(opts.stream);
    const d = this.device.activeDriver;
    if (!d) return void this.hostBytes.fill(value);
    const stream = opts.stream ?? this.device.stream;
    if (this.byteLength === 0) return;
    d.memset8(this.ptr, value, this.byteLength, stream.handle);
  }

  /**
   * Queues filling the buffer with the 32-bit pattern `bits` (e.g. a float's bits). Throws ArgumentError unless
   * byteLength is a multiple of 4.
   */
  fill32(bits: number, opts: { stream?: Stream } = {}): void {
    checkOptionKeys(opts, STREAM_KEYS);
    if (this.byteLength % 4 !== 0) throw new ArgumentError("buffer", "a byte length divisible by 4", this.byteLength);
    this.#checkStream(opts.stream);
    const d = this.device.activeDriver;
    if (!d) {
      return void new Uint32Array(this.hostBytes.buffer, this.hostBytes.byteOffset, this.byteLength / 4).fill(
        bits >>> 0,
      );
    }
    const stream = opts.stream ?? this.device.stream;
    if (this.byteLength === 0) return;
    d.memset32(this.ptr, bits, this.byteLength / 4, stream.handle);
  }
}

/**
 * Page-locked host memory (cuMemHostAlloc), for copies that do not block: DeviceBuffer.writeAsync() and
 * readAsync(). Made by `device.pinned(bytes)`. `bytes` is a view of it; don't touch it after close().
 *
 * @example An asynchronous download
 * ```ts
 * import { Device } from "@normkit/normkit/gpu";
 * using dev = Device.open();
 * using buf = dev.alloc(4 * 1024);
 * buf.fill32(0x3f800000);                       // 1.0f in every element
 * using host = dev.pinned(buf.byteLength);
 * buf.readAsync(host);
 * dev.stream.synchronize();
 * const values = new Float32Array(host.bytes.buffer, host.bytes.byteOffset, buf.byteLength / 4);
 * ```
 */
export class PinnedBuffer extends Resource {
  /** The device whose context pinned the memory. */
  readonly device: Device;
  /** The size in bytes. */
  readonly byteLength: number;
  readonly #address: bigint;
  readonly #bytes: Uint8Array;

  /** @internal use device.pinned() */
  constructor(device: Device, byteLength: number, address: bigint, bytes: Uint8Array, release: () => void) {
    super(device.owner, release, device);
    this.device = device;
    this.byteLength = byteLength;
    this.#address = address;
    this.#bytes = bytes;
  }

  /** "PinnedBuffer(N bytes)", for error messages. */
  protected get label(): string {
    return `PinnedBuffer(${this.byteLength} bytes)`;
  }

  /** The host address of the memory, for interop. Throws DisposedError when closed. */
  get address(): bigint {
    this.assertOpen();
    return this.#address;
  }

  /** The memory as bytes. Make typed views with `new Float32Array(p.bytes.buffer, p.bytes.byteOffset, n)`. */
  get bytes(): Uint8Array {
    this.assertOpen();
    return this.#bytes;
  }
}
