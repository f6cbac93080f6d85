// Programmatic dependent launch (PTX griddepcontrol, compute capability
// 9.0+; launches with programmatic stream serialization:
// cuda.Driver.LaunchKernelPDL). PDL_WAIT blocks until the kernel before
// this one on the stream has completed and its writes are visible (at
// once when this kernel was launched the ordinary way); a kernel that may
// be launched so executes it before it reads or writes any buffer another
// kernel touches, since it may start while that kernel still runs.
// PDL_LAUNCH lets the next kernel of the stream be launched (its blocks
// placed and its prologue run) before this one ends. PDL_ENTRY is both,
// first thing in a kernel with no prologue: the launch comes after the
// wait, so at most one kernel waits ahead of the running one.
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
    PDL_WAIT();     \
    PDL_LAUNCH();   \
  } while (0)
