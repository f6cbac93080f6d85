package cuda

import "unsafe"

// OccupancyMaxActiveBlocksPerMultiprocessor is how many blocks of f with
// blockSize threads and sharedBytes of dynamic shared memory fit on one
// multiprocessor at once (registers, shared memory, threads).
func (d *Driver) OccupancyMaxActiveBlocksPerMultiprocessor(f Function, blockSize int, sharedBytes int64) (int, error) {
	var n int32
	err := d.c.Call("cuOccupancyMaxActiveBlocksPerMultiprocessor", uintptr(unsafe.Pointer(&n)), uintptr(f), uintptr(blockSize), uintptr(sharedBytes))
	return int(n), err
}

// DeviceUUID is the device's 16-byte UUID: equal in every process that
// sees the GPU, whatever its ordinal there (CUDA_VISIBLE_DEVICES).
func (d *Driver) DeviceUUID(dev Device) ([16]byte, error) {
	var u [16]byte
	err := d.c.Call("cuDeviceGetUuid_v2", uintptr(unsafe.Pointer(&u)), uintptr(dev))
	return u, err
}

// CtxSMCount is how many multiprocessors the current context may use
// (CUexecAffinityParam of type CU_EXEC_AFFINITY_TYPE_SM_COUNT): under MPS
// with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, fewer than the device has. The
// driver refuses the query where execution affinity is not supported
// (no MPS): callers use the device's count then.
func (d *Driver) CtxSMCount() (int, error) {
	var p struct {
		typ int32
		val uint32
	}
	err := d.c.Call("cuCtxGetExecAffinity", uintptr(unsafe.Pointer(&p)), 0)
	return int(p.val), err
}
