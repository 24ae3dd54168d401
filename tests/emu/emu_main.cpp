// The fused kernels (kernels/fused.cu) and the tuned forward kernels of the register-caching mappings
// (kernels/norm.cu), unmodified, compiled for the host, and a launcher with CUDA semantics: blocks one after another,
// each block's threads as std::threads (tests/emu/README.md).
//
// usage: fused_emu MANIFEST
// MANIFEST (text, whitespace-separated):
//   kernel NAME
//   grid GX
//   block BX
//   buffer BASE BYTES INFILE OUTFILE      (BASE: the address the library passed, decimal; INFILE/OUTFILE or -)
//   arg p ADDRESS | arg i VALUE | arg l VALUE | arg f F32BITS   (28 of them, in NK_FUSED_PARAMS order; 6 for
//                                                                nk_fused_add_*: dst, src, rows, d, strides; 14 for
//                                                                a tuned forward kernel, NK_FWD_PARAMS)
// Each pointer argument is mapped to the buffer holding it (BASE <= ADDRESS <= BASE + BYTES, offset kept); each
// buffer is host memory aligned to 256 bytes with 256-byte canaries on both sides, checked after the launch.
#include <atomic>
#include <cstdint>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../../kernels/fused.cu"
#include "../../kernels/norm.cu"

// The tuned kernels' dynamic shared memory (fwd_common.cuh's extern array): one block runs at a time. 64 KiB, past what
// the emulated mappings ask for (ops/plan.ts: sharedBytes).
float nk_fwd_smem[16384];

static std::mutex nk_emu_trap_mu;
void nk_emu_trap_report() {
  std::lock_guard<std::mutex> g(nk_emu_trap_mu);
  std::fprintf(stderr, "fused_emu: nk_trap() in block %u thread %u\n", nk_emu_blk ? nk_emu_blk->bid : 0u, nk_emu_tid);
}

typedef void (*nk_fused_fn)(NK_FUSED_PARAMS);
struct KernelEntry {
  const char* name;
  nk_fused_fn fn;
};
static const KernelEntry kKernels[] = {
#include "kernel_table.inc"
};
// The tuned forward kernels whose mappings need no cluster, no cp.async and no more than 1024 threads: every dtype
// triple of norm.cu (NK_FWD_DTYPES).
typedef void (*nk_fwd_fn)(NK_FWD_PARAMS);
struct FwdEntry {
  const char* name;
  nk_fwd_fn fn;
};
#define NK_EMU_FWD1(kind, map, ti, to, tw) \
  {"nk_" #kind "_" #map "_" #ti "_" #to "_" #tw, nk_##kind##_##map##_##ti##_##to##_##tw},
#define NK_EMU_FWD(ti, to, tw)                                                                     \
  NK_EMU_FWD1(ln, rows, ti, to, tw) NK_EMU_FWD1(ln, rowstwopass, ti, to, tw)                       \
  NK_EMU_FWD1(ln, block, ti, to, tw) NK_EMU_FWD1(ln, blockfull, ti, to, tw)                        \
  NK_EMU_FWD1(ln, latency, ti, to, tw) NK_EMU_FWD1(ln, rowstile, ti, to, tw)                       \
  NK_EMU_FWD1(rms, rows, ti, to, tw) NK_EMU_FWD1(rms, block, ti, to, tw)                           \
  NK_EMU_FWD1(rms, latency, ti, to, tw) NK_EMU_FWD1(rms, rowstile, ti, to, tw)
static const FwdEntry kFwdKernels[] = {NK_FWD_DTYPES(NK_EMU_FWD)};

typedef void (*nk_add_fn)(void*, const void*, int, int, long long, long long);
struct AddEntry {
  const char* name;
  nk_add_fn fn;
};
static const AddEntry kAddKernels[] = {
    {"nk_fused_add_f32", nk_fused_add_f32}, {"nk_fused_add_f16", nk_fused_add_f16}, {"nk_fused_add_bf16", nk_fused_add_bf16}};

namespace {
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kCanary = 0;  // AddressSanitizer: exact-size buffers, any access outside reported by it
#else
constexpr size_t kCanary = 256;
#endif
constexpr unsigned char kCanaryByte = 0xA5;

struct Buffer {
  unsigned long long base = 0;
  size_t bytes = 0;
  std::string in, out;
  unsigned char* mem = nullptr;  // kCanary before data, kCanary after
  unsigned char* data() const { return mem + kCanary; }
};

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "fused_emu: %s\n", m.c_str());
  std::exit(2);
}

bool read_file(const std::string& path, unsigned char* dst, size_t n) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  f.read((char*)dst, (std::streamsize)n);
  return (size_t)f.gcount() == n;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) die("usage: fused_emu MANIFEST");
  std::ifstream mf(argv[1]);
  if (!mf) die(std::string("cannot read ") + argv[1]);
  std::string kernel;
  unsigned gx = 0, bx = 0;
  std::vector<Buffer> bufs;
  struct Arg {
    char t;
    unsigned long long u;
    long long l;
  };
  std::vector<Arg> args;
  std::string tok;
  while (mf >> tok) {
    if (tok == "kernel") mf >> kernel;
    else if (tok == "grid") mf >> gx;
    else if (tok == "block") mf >> bx;
    else if (tok == "buffer") {
      Buffer b;
      mf >> b.base >> b.bytes >> b.in >> b.out;
      bufs.push_back(b);
    } else if (tok == "arg") {
      Arg a{};
      std::string t;
      mf >> t;
      a.t = t[0];
      if (a.t == 'p' || a.t == 'f') mf >> a.u;
      else mf >> a.l;
      args.push_back(a);
    } else die("bad manifest token " + tok);
  }
  nk_fused_fn fn = nullptr;
  nk_add_fn add_fn = nullptr;
  nk_fwd_fn fwd_fn = nullptr;
  for (const auto& k : kKernels)
    if (kernel == k.name) fn = k.fn;
  for (const auto& k : kAddKernels)
    if (kernel == k.name) add_fn = k.fn;
  for (const auto& k : kFwdKernels)
    if (kernel == k.name) fwd_fn = k.fn;
  if (!fn && !add_fn && !fwd_fn) die("no kernel " + kernel);
  const size_t nargs = fn ? 28 : fwd_fn ? 14 : 6, nptrs = fn ? 10 : fwd_fn ? 6 : 2;
  if (args.size() != nargs) die("expected " + std::to_string(nargs) + " arguments, got " + std::to_string(args.size()));
  if (bx == 0 || bx > 1024 || bx % 32 != 0) die("bad block " + std::to_string(bx));

  for (auto& b : bufs) {
    const size_t total = kCanary ? kCanary + ((b.bytes + 255) / 256) * 256 + kCanary : (b.bytes ? b.bytes : 1);
    void* m = nullptr;
    if (posix_memalign(&m, 256, total) != 0) die("out of memory");
    b.mem = (unsigned char*)m;
    std::memset(b.mem, kCanaryByte, total);
    if (b.in != "-" && !read_file(b.in, b.data(), b.bytes)) die("cannot read " + b.in);
  }
  // Pointer arguments: the buffer that holds the address, offset kept (base 256-aligned on both sides).
  auto map_ptr = [&](unsigned long long a) -> void* {
    if (a == 0) return nullptr;
    for (auto& b : bufs)
      if (a >= b.base && a <= b.base + b.bytes) return b.data() + (a - b.base);
    die("pointer argument " + std::to_string(a) + " lies in no buffer");
  };
  void* p[10];
  for (size_t i = 0; i < nptrs; ++i) {
    if (args[i].t != 'p') die("argument " + std::to_string(i) + " should be a pointer");
    p[i] = map_ptr(args[i].u);
  }
  auto I = [&](int i) { return (int)args[i].l; };
  auto L = [&](int i) { return (long long)args[i].l; };
  auto F = [&](int i) { return nk_u2f((unsigned)args[i].u); };

  const unsigned nwarps = bx / 32;
  for (unsigned b = 0; b < gx; ++b) {
    std::barrier<> block_bar((std::ptrdiff_t)bx);
    std::vector<std::unique_ptr<std::barrier<>>> wb;
    // std::barrier is neither copyable nor movable: an array built in place.
    std::allocator<std::barrier<>> alloc;
    std::barrier<>* warp_bars = alloc.allocate(nwarps);
    for (unsigned w = 0; w < nwarps; ++w) new (&warp_bars[w]) std::barrier<>(32);
    std::vector<float> slots(32 * nwarps);
    std::vector<unsigned> uslots(32 * nwarps);
    nk_emu_block blk{b, bx, gx, &block_bar, warp_bars, (float(*)[32])slots.data(), (unsigned(*)[32])uslots.data()};
    std::vector<std::thread> threads;
    threads.reserve(bx);
    for (unsigned t = 0; t < bx; ++t) {
      threads.emplace_back([&, t] {
        nk_emu_tid = t;
        nk_emu_blk = &blk;
        if (add_fn) add_fn(p[0], p[1], I(2), I(3), L(4), L(5));
        else if (fwd_fn)
          fwd_fn(p[0], p[1], p[2], p[3], (float*)p[4], (float*)p[5], I(6), I(7), L(8), L(9), F(10), I(11), I(12),
                 I(13));
        else
          fn(p[0], p[1], p[2], p[3], p[4], p[5], p[6], (float*)p[7], (float*)p[8], (float*)p[9], I(10), I(11), I(12),
             L(13), L(14), L(15), L(16), L(17), L(18), L(19), L(20), F(21), F(22), F(23), I(24), I(25), I(26), I(27));
      });
    }
    for (auto& th : threads) th.join();
    for (unsigned w = 0; w < nwarps; ++w) warp_bars[w].~barrier();
    alloc.deallocate(warp_bars, nwarps);
  }

  int bad = 0;
  for (auto& b : bufs) {
    const size_t padded = ((b.bytes + 255) / 256) * 256;
    for (size_t i = 0; i < kCanary; ++i)
      if (b.mem[i] != kCanaryByte) {
        std::fprintf(stderr, "fused_emu: write before buffer at %llu (byte -%zu)\n", b.base, kCanary - i);
        bad = 1;
        break;
      }
    for (size_t i = b.bytes; kCanary && i < padded + kCanary; ++i)
      if (b.data()[i] != kCanaryByte) {
        std::fprintf(stderr, "fused_emu: write past buffer at %llu (byte %zu of %zu)\n", b.base, i, b.bytes);
        bad = 1;
        break;
      }
    if (b.out != "-") {
      std::ofstream f(b.out, std::ios::binary);
      f.write((const char*)b.data(), (std::streamsize)b.bytes);
      if (!f) die("cannot write " + b.out);
    }
    std::free(b.mem);
  }
  return bad ? 3 : 0;
}
