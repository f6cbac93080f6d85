package cuda

import (
	"encoding/binary"
	"unsafe"
)

// IpcOpenMemHandle maps a peer process's allocation. cuIpcOpenMemHandle
// takes the 64-byte handle by value; under the System V AMD64 ABI a
// struct that large is passed in memory, on the stack after the register
// arguments, so the call passes the two scalar arguments (in rdi and rsi),
// four unused register slots, then the handle as eight stack words.
func (d *Driver) IpcOpenMemHandle(h IpcMemHandle, flags uint) (DevicePtr, error) {
	var p DevicePtr
	var w [8]uintptr
	for i := range w {
		w[i] = uintptr(binary.LittleEndian.Uint64(h[8*i:]))
	}
	err := d.c.Call("cuIpcOpenMemHandle_v2", uintptr(unsafe.Pointer(&p)), uintptr(flags), 0, 0, 0, 0,
		w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7])
	return p, err
}
