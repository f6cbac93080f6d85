package cudasrc

import _ "embed"

// Half defines u16, h2f/f2h (float16) and b2f/f2b (bfloat16).
//
//go:embed half.cuh
var Half string

// PDL defines PDL_WAIT, PDL_LAUNCH and PDL_ENTRY (griddepcontrol on
// compute capability 9.0+, nothing before).
//
//go:embed pdl.cuh
var PDL string

// MemOrder defines u32, u64 and the system- and GPU-scope loads and
// stores with explicit memory order (ld_acquire_sys_u32 ...
// st_relaxed_gpu_u64) that cross-rank waits use: ccl/ipc's barriers, the
// plan executor's signals.
//
//go:embed memorder.cuh
var MemOrder string
