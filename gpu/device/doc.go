// Package device is chorus's view of one GPU: a small interface (memory,
// copies in every direction, memset, synchronisation) with two
// implementations, CUDA (gpu/cuda underneath; every call makes the device's
// primary context current on the caller's locked thread and queues on the
// device's one stream) and Fake (host
// memory), so that sessions, allocators and collectives are tested
// without a GPU. Pool adds a caching allocator with statistics on top of
// any Device. Stager (both implement it) adds pinned host memory and
// asynchronous host-to-device copies from it, for loaders that stage
// data through a pair of pinned buffers.
package device
