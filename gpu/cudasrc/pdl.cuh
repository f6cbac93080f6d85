// Programmatic dependent launch (PTX griddepcontrol, compute capability
// 9.0+; launches with programmatic stream serialization:
// cuda.Driver.LaunchKernelPDL). PDL_WAIT blocks until the kernel before
// this one on the stream has completed and its writes are visible (at
// once when this kernel was launched the ordinary way); a kernel that may
// be launched so executes it before it reads or writes any buffer another
// kernel touches, since it may start while that kernel still runs.
// PDL_LAUNCH lets the next kernel of the stream be launched (its blocks
// placed and its prologue run) before this one ends. PDL_ENTRY is both,
// first thing in a kernel with no prologue, the launch first: a kernel
// that waits lets the next one be placed at once, so a product's blocks
// behind a norm or an attention take each multiprocessor the product
// before frees and copy their first weights while its last blocks run.
// Every kernel still waits before it touches a buffer, and the wait
// covers every kernel before (each completes only after its own wait),
// so nothing reads another kernel's results early; what may run early
// is only a prologue reading weights no kernel of the call writes, and
// the first kernel of a call is launched the ordinary way
// (compiler/kernels, launchOn) so that no prologue overlaps the call
// before. On an H200, Llama-3-8B at batch 1, graph-replayed, same call:
// 4.065-4.089 ms a step against 4.209-4.226 with the wait first
// (context 4096: 4.299-4.317 against 4.401-4.447); batch 8 unchanged.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define PDL_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define PDL_WAIT() \
  do {             \
  } while (0)
#define PDL_LAUNCH() \
  do {               \
  } while (0)
#endif
#define PDL_ENTRY() \
  do {              \
    PDL_LAUNCH();   \
    PDL_WAIT();     \
  } while (0)
