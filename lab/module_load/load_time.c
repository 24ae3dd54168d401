// What an image costs the driver to load: for each image named, cuModuleLoadData then cuModuleUnload, `reps` times in
// one context after a first load (the first is reported apart: the process's first load pays once-only costs), and
// cuModuleGetFunction of one kernel of it after a load (where CUDA_MODULE_LOADING=LAZY, the driver's default, a
// kernel's code is uploaded when first asked for). One JSON line per image; milliseconds.
// Usage: load_time REPS KERNEL IMAGE [KERNEL IMAGE ...]   (lab/module_load/run.sh)
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
#define CHECK(call)                                                                    \
  do {                                                                                 \
    CUresult r_ = (call);                                                              \
    if (r_ != CUDA_SUCCESS) { fprintf(stderr, "%s: error %d\n", #call, r_); exit(1); } \
  } while (0)

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static char* read_file(const char* path, long* n) {
  FILE* f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(3); }
  fseek(f, 0, SEEK_END);
  *n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* img = malloc(*n);
  if (!img || fread(img, 1, *n, f) != (size_t)*n) { fprintf(stderr, "cannot read %s\n", path); exit(4); }
  fclose(f);
  return img;
}

int main(int argc, char** argv) {
  if (argc < 4 || argc % 2 != 0) {
    fprintf(stderr, "usage: load_time REPS KERNEL IMAGE [KERNEL IMAGE ...]\n");
    return 2;
  }
  const int reps = atoi(argv[1]);
  if (reps < 1 || reps > 1000) { fprintf(stderr, "REPS: 1 to 1000\n"); return 2; }
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) { fprintf(stderr, "libcuda.so.1: %s\n", dlerror()); return 2; }
  CUresult (*init)(unsigned) = dlsym(h, "cuInit");
  CUresult (*devget)(CUdevice*, int) = dlsym(h, "cuDeviceGet");
  CUresult (*retain)(CUcontext*, CUdevice) = dlsym(h, "cuDevicePrimaryCtxRetain");
  CUresult (*setcur)(CUcontext) = dlsym(h, "cuCtxSetCurrent");
  CUresult (*load)(CUmodule*, const void*) = dlsym(h, "cuModuleLoadData");
  CUresult (*unload)(CUmodule) = dlsym(h, "cuModuleUnload");
  CUresult (*getfn)(CUfunction*, CUmodule, const char*) = dlsym(h, "cuModuleGetFunction");
  if (!init || !devget || !retain || !setcur || !load || !unload || !getfn) { fprintf(stderr, "dlsym failed\n"); return 2; }
  CUdevice dev;
  CUcontext ctx;
  CHECK(init(0));
  CHECK(devget(&dev, 0));
  CHECK(retain(&ctx, dev));
  CHECK(setcur(ctx));
  double* t = malloc(sizeof(double) * reps);
  double* g = malloc(sizeof(double) * reps);
  for (int i = 2; i < argc; i += 2) {
    const char* kernel = argv[i];
    long n;
    char* img = read_file(argv[i + 1], &n);
    CUmodule m;
    CUfunction fn;
    double t0 = now_ms();
    CHECK(load(&m, img));
    const double first = now_ms() - t0;
    CHECK(unload(m));
    for (int r = 0; r < reps; r++) {
      t0 = now_ms();
      CHECK(load(&m, img));
      const double t1 = now_ms();
      CHECK(getfn(&fn, m, kernel));
      g[r] = now_ms() - t1;
      t[r] = t1 - t0;
      CHECK(unload(m));
    }
    qsort(t, reps, sizeof(double), cmp);
    qsort(g, reps, sizeof(double), cmp);
    printf("{\"image\": \"%s\", \"bytes\": %ld, \"first_load_ms\": %.3f, \"load_ms_median\": %.3f, \"load_ms_min\": %.3f, "
           "\"get_function_ms_median\": %.3f, \"reps\": %d}\n",
           argv[i + 1], n, first, t[reps / 2], t[0], g[reps / 2], reps);
    free(img);
  }
  return 0;
}
