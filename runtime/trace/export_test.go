package trace

import "unsafe"

func unsafeBytes(w []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)
}
