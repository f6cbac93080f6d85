// Package device is chorus's view of one GPU: a small interface (memory,
// copies in every direction, memset, synchronisation) with two
// implementations, CUDA (gpu/cuda underneath, every call on one locked OS
// thread that owns the device's context and stream) and Fake (host
// memory), so that sessions, allocators and collectives are tested
// without a GPU. Pool adds a caching allocator with statistics on top of
// any Device.
package device
