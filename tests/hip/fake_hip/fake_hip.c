/*
 * A fake libamdhip64 for tests/hip/fake_library.test.ts: one "AMD GPU" whose device memory is host memory and whose
 * launches run nothing. It lets the HIP path of normkit (device info, gfx arch from hipDeviceProp_t, code-object
 * choice, hipModuleLoadData, argument packing, launch geometry) run through the real FFI without an AMD GPU.
 * It proves what normkit passes to HIP, not that any kernel computes the right thing on AMD hardware.
 *
 * Environment: NK_FAKE_ARCH (gcnArchName, default "gfx942:sramecc+:xnack-"), NK_FAKE_WAVE (warp size, default
 * 64), NK_FAKE_LOG (file that gets one line per module load, function lookup and launch).
 * gcnArchName is written at the offset the real header gives (nk_gcn_arch_offset, from prop_offset.cc).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const size_t nk_gcn_arch_offset;

static void logf_(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void logf_(const char* fmt, ...) {
  const char* path = getenv("NK_FAKE_LOG");
  if (!path) return;
  FILE* f = fopen(path, "a");
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fclose(f);
}
static int wave(void) { const char* w = getenv("NK_FAKE_WAVE"); return w ? atoi(w) : 64; }
static const char* arch(void) { const char* a = getenv("NK_FAKE_ARCH"); return a ? a : "gfx942:sramecc+:xnack-"; }
static const char* NAME = "Fake AMD Instinct (normkit test double)";

int hipInit(unsigned flags) { (void)flags; return 0; }
int hipDriverGetVersion(int* v) { *v = 50223000; return 0; }
const char* hipGetErrorName(int e) { return e == 0 ? "hipSuccess" : e == 100 ? "hipErrorNoDevice" : "hipErrorInvalidValue"; }
const char* hipGetErrorString(int e) { return e == 0 ? "no error" : "fake HIP error"; }
int hipGetDeviceCount(int* n) { *n = 1; return 0; }
int hipSetDevice(int d) { return d == 0 ? 0 : 101; }
int hipDeviceGetAttribute(int* v, int attr, int dev) {
  (void)dev;
  switch (attr) {  /* hipDeviceAttribute_t of HIP 5.2 (ffi/hip.ts HIP_DEVICE_ATTRIBUTE) */
    case 19: *v = 8 << 20; break;                 /* L2CacheSize */
    case 23: *v = 9; break;                       /* ComputeCapabilityMajor */
    case 61: *v = 4; break;                       /* ComputeCapabilityMinor */
    case 26: case 27: case 28: *v = 1024; break;  /* MaxBlockDim */
    case 29: *v = 2147483647; break;              /* MaxGridDimX */
    case 30: case 31: *v = 65536; break;
    case 56: *v = 1024; break;                    /* MaxThreadsPerBlock */
    case 63: *v = 104; break;                     /* MultiprocessorCount */
    case 74: case 75: *v = 65536; break;          /* shared per block, opt-in */
    case 87: *v = wave(); break;                  /* WarpSize */
    default: *v = 0;
  }
  return 0;
}
int hipDeviceGetName(char* name, int len, int dev) { (void)dev; snprintf(name, (size_t)len, "%s", NAME); return 0; }
int hipGetDeviceProperties(void* prop, int dev) {
  (void)dev;
  memset(prop, 0, nk_gcn_arch_offset + 256);
  snprintf((char*)prop, 256, "%s", NAME);
  snprintf((char*)prop + nk_gcn_arch_offset, 256, "%s", arch());
  return 0;
}
int hipDeviceTotalMem(size_t* b, int dev) { (void)dev; *b = (size_t)64 << 30; return 0; }
int hipDeviceSynchronize(void) { return 0; }
int hipDeviceReset(void) { return 0; }

int hipMalloc(void** p, size_t n) { *p = aligned_alloc(256, (n + 255) / 256 * 256); return *p ? 0 : 2; }
int hipFree(void* p) { free(p); return 0; }
int hipMemGetInfo(size_t* f, size_t* t) { *f = (size_t)60 << 30; *t = (size_t)64 << 30; return 0; }
int hipMemsetD8Async(void* d, unsigned v, size_t n, void* s) { (void)s; memset(d, (int)v, n); return 0; }
int hipMemsetD32Async(void* d, int v, size_t n, void* s) { (void)s; for (size_t i = 0; i < n; i++) ((int*)d)[i] = v; return 0; }
int hipMemcpyHtoD(void* d, const void* s, size_t n) { memcpy(d, s, n); return 0; }
int hipMemcpyDtoH(void* d, const void* s, size_t n) { memcpy(d, s, n); return 0; }
int hipMemcpyHtoDAsync(void* d, const void* s, size_t n, void* st) { (void)st; memcpy(d, s, n); return 0; }
int hipMemcpyDtoHAsync(void* d, const void* s, size_t n, void* st) { (void)st; memcpy(d, s, n); return 0; }
int hipMemcpyDtoDAsync(void* d, const void* s, size_t n, void* st) { (void)st; memmove(d, s, n); return 0; }
int hipHostMalloc(void** p, size_t n, unsigned fl) { (void)fl; *p = aligned_alloc(4096, (n + 4095) / 4096 * 4096); return *p ? 0 : 2; }
int hipHostFree(void* p) { free(p); return 0; }

static uintptr_t handles = 0x1000;
int hipStreamCreateWithFlags(void** s, unsigned fl) { (void)fl; *s = (void*)(handles += 16); return 0; }
int hipStreamDestroy(void* s) { (void)s; return 0; }
int hipStreamSynchronize(void* s) { (void)s; return 0; }
int hipStreamWaitEvent(void* s, void* e, unsigned fl) { (void)s; (void)e; (void)fl; return 0; }
int hipStreamQuery(void* s) { (void)s; return 0; }
int hipEventCreateWithFlags(void** e, unsigned fl) { (void)fl; *e = (void*)(handles += 16); return 0; }
int hipEventRecord(void* e, void* s) { (void)e; (void)s; return 0; }
int hipEventSynchronize(void* e) { (void)e; return 0; }
int hipEventQuery(void* e) { (void)e; return 0; }
int hipEventElapsedTime(float* ms, void* a, void* b) { (void)a; (void)b; *ms = 0; return 0; }
int hipEventDestroy(void* e) { (void)e; return 0; }

/* Modules: the image must be a 64-bit AMDGPU ELF; its length is where the section header table ends. */
int hipModuleLoadData(void** m, const void* image) {
  const unsigned char* b = (const unsigned char*)image;
  if (memcmp(b, "\x7f" "ELF", 4) != 0 || b[4] != 2 || (b[18] | b[19] << 8) != 224) return 200; /* hipErrorInvalidImage */
  uint64_t shoff; uint16_t shentsize, shnum;
  memcpy(&shoff, b + 0x28, 8); memcpy(&shentsize, b + 0x3a, 2); memcpy(&shnum, b + 0x3c, 2);
  const uint64_t size = shoff + (uint64_t)shentsize * shnum;
  uint64_t h = 14695981039346656037ull;  /* FNV-1a 64 */
  for (uint64_t i = 0; i < size; i++) h = (h ^ b[i]) * 1099511628211ull;
  logf_("load %llu %016llx\n", (unsigned long long)size, (unsigned long long)h);
  *m = (void*)(handles += 16);
  return 0;
}
int hipModuleUnload(void* m) { (void)m; return 0; }
int hipModuleGetFunction(void** f, void* m, const char* name) {
  (void)m;
  logf_("function %s\n", name);
  *f = strdup(name);  /* the "function" is its name, for the launch log */
  return 0;
}
int hipFuncGetAttribute(int* v, int attr, void* f) { (void)f; *v = attr == 0 ? 1024 : attr == 8 ? 65536 : 0; return 0; }
int hipFuncSetAttribute(const void* f, int attr, int v) { (void)f; (void)attr; (void)v; return 0; }
int hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(int* n, void* f, int t, size_t s) { (void)f; (void)t; (void)s; *n = 2; return 0; }
int hipModuleLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned shared, void* stream, void** params, void** extra) {
  (void)stream; (void)extra;
  const char* name = (const char*)f;
  /* FUSED_ADD_ARGS, FUSED_ARGS, NORM_FWD_ARGS, the scale kernel's */
  const int n = strncmp(name, "nk_fused_add_", 13) == 0 ? 6
              : strncmp(name, "nk_fused_", 9) == 0    ? 28
              : strncmp(name, "nk_", 3) == 0          ? 14
                                                      : 4;
  char line[1024];
  int at = snprintf(line, sizeof line, "launch %s %u %u %u %u %u %u %u", name, gx, gy, gz, bx, by, bz, shared);
  for (int i = 0; i < n; i++) {
    uint64_t v;
    memcpy(&v, params[i], 8);
    at += snprintf(line + at, sizeof line - (size_t)at, " %016llx", (unsigned long long)v);
  }
  logf_("%s\n", line);
  return 0;
}
