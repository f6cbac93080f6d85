// The host cost of launching an empty kernel from C through the CUDA
// driver API: the anchor for `chorus bench decode --launch N` (the same
// launches through purego). It loads libcuda.so.1 with dlopen, so it
// builds anywhere with `cc -O2 -o launch_cost launch_cost.c -ldl` (no
// CUDA headers or toolkit) and runs on any machine with the driver.
//
// For N launches back to back on one stream (N from argv[1], default
// 1000; five rounds of each way, interleaved, the median printed):
// cuLaunchKernel, cuLaunchKernelEx without attributes, cuLaunchKernelEx
// with programmatic stream serialization (the attribute chorus's PDL
// launches set), and the last again for a kernel of one 400-byte struct
// argument (ccl/ipc's all-reduce arguments); the cuLaunchKernelEx ways
// are skipped where the driver lacks the function. Each is timed on the
// host from the first call to the last call's return, the stream
// synchronized between rounds; then
// cuCtxSetCurrent of the context already current (what chorus's
// device.Do calls before each piece of work) and cuCtxGetCurrent (what
// a check before it would cost). Prints one JSON line.
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;

typedef struct {
  int id;
  int pad;
  unsigned char value[64];
} LaunchAttr;

typedef struct {
  unsigned gx, gy, gz, bx, by, bz, shared;
  CUstream stream;
  LaunchAttr* attrs;
  unsigned nattrs;
} LaunchConfig;

static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGet)(CUdevice*, int);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuCtxGetCurrent)(CUcontext*);
static CUresult (*cuModuleLoadData)(CUmodule*, const void*);
static CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
static CUresult (*cuStreamCreate)(CUstream*, unsigned);
static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**,
                                  void**);
static CUresult (*cuLaunchKernelEx)(const LaunchConfig*, CUfunction, void**, void**);

static const char ptx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n"
    ".visible .entry chorus_empty()\n{\n ret;\n}\n"
    ".visible .entry chorus_args(.param .align 8 .b8 a[400])\n{\n ret;\n}\n";

// The argument block of the chorus_args launches (ccl/ipc's kargs size).
static uint64_t args[50];

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void* sym(void* lib, const char* name, int required) {
  void* p = dlsym(lib, name);
  if (!p && required) {
    fprintf(stderr, "launch_cost: libcuda.so.1 has no %s\n", name);
    exit(1);
  }
  return p;
}

static void check(CUresult r, const char* what) {
  if (r != 0) {
    fprintf(stderr, "launch_cost: %s failed: CUresult %d\n", what, r);
    exit(1);
  }
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// One round of n launches back to back (ex: 0 cuLaunchKernel, 1
// cuLaunchKernelEx without attributes, 2 cuLaunchKernelEx with
// programmatic stream serialization, 3 the same with fa, the kernel of
// 400 bytes of parameters); microseconds a launch.
static double timed(CUfunction f, CUfunction fa, CUstream s, int n, int ex) {
  LaunchConfig cfg;
  LaunchAttr attr;
  memset(&cfg, 0, sizeof cfg);
  memset(&attr, 0, sizeof attr);
  attr.id = 6;  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
  *(int*)attr.value = 1;
  cfg.gx = cfg.gy = cfg.gz = 1;
  cfg.bx = 32;
  cfg.by = cfg.bz = 1;
  cfg.stream = s;
  cfg.attrs = ex >= 2 ? &attr : NULL;
  cfg.nattrs = ex >= 2 ? 1 : 0;
  void* params[1] = {args};
  CUfunction g = ex == 3 ? fa : f;
  void** p = ex == 3 ? params : NULL;
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  double t0 = now_us();
  for (int i = 0; i < n; i++) {
    if (ex)
      check(cuLaunchKernelEx(&cfg, g, p, NULL), "cuLaunchKernelEx");
    else
      check(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL), "cuLaunchKernel");
  }
  double us = (now_us() - t0) / n;
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  return us;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1000;
  if (n < 1 || n > 1 << 20) {
    fprintf(stderr, "launch_cost: launches %s: want 1 to 1048576\n", argv[1]);
    return 2;
  }
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "launch_cost: %s\n", dlerror());
    return 1;
  }
  cuInit = sym(lib, "cuInit", 1);
  cuDeviceGet = sym(lib, "cuDeviceGet", 1);
  cuDevicePrimaryCtxRetain = sym(lib, "cuDevicePrimaryCtxRetain", 1);
  cuCtxSetCurrent = sym(lib, "cuCtxSetCurrent", 1);
  cuCtxGetCurrent = sym(lib, "cuCtxGetCurrent", 1);
  cuModuleLoadData = sym(lib, "cuModuleLoadData", 1);
  cuModuleGetFunction = sym(lib, "cuModuleGetFunction", 1);
  cuStreamCreate = sym(lib, "cuStreamCreate", 1);
  cuStreamSynchronize = sym(lib, "cuStreamSynchronize", 1);
  cuLaunchKernel = sym(lib, "cuLaunchKernel", 1);
  cuLaunchKernelEx = sym(lib, "cuLaunchKernelEx", 0);
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction f, fa;
  CUstream s;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  check(cuModuleLoadData(&mod, ptx), "cuModuleLoadData");
  check(cuModuleGetFunction(&f, mod, "chorus_empty"), "cuModuleGetFunction");
  check(cuModuleGetFunction(&fa, mod, "chorus_args"), "cuModuleGetFunction");
  check(cuStreamCreate(&s, 0), "cuStreamCreate");
  // Five rounds of each way, interleaved so that drift spreads evenly;
  // the median of each.
  int ways = cuLaunchKernelEx ? 4 : 1;
  double w[4][5];
  for (int k = 0; k < ways; k++) timed(f, fa, s, 100, k);  // warm the paths
  for (int r = 0; r < 5; r++)
    for (int k = 0; k < ways; k++) w[k][r] = timed(f, fa, s, n, k);
  for (int k = 0; k < ways; k++) qsort(w[k], 5, sizeof w[k][0], cmp);
  printf("{\"bench\":\"launch\",\"impl\":\"c-driver\",\"launches\":%d,\"launch_us\":%.3f", n, w[0][2]);
  if (ways == 4)
    printf(",\"launch_ex_us\":%.3f,\"launch_ex_pdl_us\":%.3f,\"launch_ex_pdl_400b_us\":%.3f", w[1][2], w[2][2], w[3][2]);
  // What chorus's device.Do pays before each launch: making the
  // (already current) primary context current again.
  double v[3];
  for (int r = 0; r < 3; r++) {
    double t0 = now_us();
    for (int i = 0; i < n; i++) check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    v[r] = (now_us() - t0) / n;
  }
  qsort(v, 3, sizeof v[0], cmp);
  printf(",\"set_current_us\":%.3f", v[1]);
  // What a check before it would cost: reading the current context.
  CUcontext cur;
  for (int r = 0; r < 3; r++) {
    double t0 = now_us();
    for (int i = 0; i < n; i++) check(cuCtxGetCurrent(&cur), "cuCtxGetCurrent");
    v[r] = (now_us() - t0) / n;
  }
  qsort(v, 3, sizeof v[0], cmp);
  printf(",\"get_current_us\":%.3f}\n", v[1]);
  return 0;
}
