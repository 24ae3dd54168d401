// Cold start from C, the driver's own part of bench/coldstart.ts: wall time of cuInit, primary-context retain,
// cuModuleLoadData of one per-architecture image (precompiled/norm_sm80.fatbin, norm_sm90.fatbin, or
// packages/ptx/norm_compute90.fatbin: the one normkit's loadKernels picks for the GPU), and the first launch +
// synchronize of a norm kernel.
// Build: bash bench/build-c.sh
// Usage: bench/coldstart_c precompiled/norm_sm90.fatbin   (one JSON line of milliseconds; run it in a fresh
// process; bench/coldstart.ts --c bench/coldstart_c runs it beside each of its own runs)
#define _POSIX_C_SOURCE 199309L
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
#define CHECK(call)                                                   \
  do {                                                                \
    CUresult r_ = (call);                                             \
    if (r_ != CUDA_SUCCESS) { fprintf(stderr, "%s: %d\n", #call, r_); return 1; } \
  } while (0)

int main(int argc, char** argv) {
  const double t0 = now_ms();
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h || argc < 2) return 2;
  CUresult (*init)(unsigned) = dlsym(h, "cuInit");
  CUresult (*devget)(CUdevice*, int) = dlsym(h, "cuDeviceGet");
  CUresult (*retain)(CUcontext*, CUdevice) = dlsym(h, "cuDevicePrimaryCtxRetain");
  CUresult (*setcur)(CUcontext) = dlsym(h, "cuCtxSetCurrent");
  CUresult (*load)(CUmodule*, const void*) = dlsym(h, "cuModuleLoadData");
  CUresult (*getfn)(CUfunction*, CUmodule, const char*) = dlsym(h, "cuModuleGetFunction");
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**) = dlsym(h, "cuLaunchKernel");
  CUresult (*sync)(void) = dlsym(h, "cuCtxSynchronize");
  CUresult (*alloc)(CUdeviceptr*, size_t) = dlsym(h, "cuMemAlloc_v2");
  FILE* f = fopen(argv[1], "rb");
  if (!f) return 3;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* img = malloc(n);
  if (fread(img, 1, n, f) != (size_t)n) return 4;
  fclose(f);
  const double t1 = now_ms();
  CHECK(init(0));
  const double t2 = now_ms();
  CUdevice dev;
  CUcontext ctx;
  CHECK(devget(&dev, 0));
  CHECK(retain(&ctx, dev));
  CHECK(setcur(ctx));
  const double t3 = now_ms();
  CUmodule mod;
  CUfunction fn;
  CHECK(load(&mod, img));
  CHECK(getfn(&fn, mod, "nk_rms_rows_bf16_bf16_f32"));
  const double t4 = now_ms();
  CUdeviceptr x, y;
  CHECK(alloc(&x, 4096 * 2));
  CHECK(alloc(&y, 4096 * 2));
  void* w = NULL; void* b = NULL; void* m = NULL; void* r = NULL;
  int rows = 1, d = 2048, tpr = 32, nv = 8, prefetch = 0;  // the rows mapping: nv * tpr * 8 >= d
  long long xs = 2048, ys = 2048;
  float eps = 1e-6f;
  void* args[] = {&x, &y, &w, &b, &m, &r, &rows, &d, &xs, &ys, &eps, &tpr, &nv, &prefetch};
  CHECK(launch(fn, 1, 1, 1, 256, 1, 1, 0, 0, args, 0));
  CHECK(sync());
  const double t5 = now_ms();
  printf("{\"dlopen_read_ms\": %.3f, \"init_ms\": %.3f, \"context_ms\": %.3f, \"module_load_ms\": %.3f, "
         "\"first_launch_ms\": %.3f, \"total_ms\": %.3f}\n",
         t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t5 - t0);
  return 0;
}
