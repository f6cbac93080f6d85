// Package shardload loads a sharded checkpoint onto a session's workers:
// each worker opens the checkpoint itself and reads only its own byte
// ranges (model/shard) into its own memory, host or GPU, so weights never
// pass through the controller.
//
// Worker functions (registered in registry.Global, so any controller can
// drive them with CallPacked):
//
//	chorus.shard.open(path, spec_json string, staging_bytes int) -> handle
//	                                                       rank = worker rank in its group,
//	                                                       n = group size; staging_bytes: size
//	                                                       of each pinned buffer (0: 8 MiB)
//	chorus.shard.info(handle) -> string                   JSON: names, sizes, a fingerprint
//	chorus.shard.load(handle, name string) -> tensor      on the worker's device; a GPU
//	                                                       worker stages through pinned memory
//	chorus.shard.bytes_read(handle) -> int                bytes this worker read so far
//	chorus.shard.close(handle)                            closes files, frees pinned buffers
//
// LoadSharded is the controller side: open everywhere, check that every
// worker sees the same checkpoint, load tensor by tensor (reporting
// progress), close; on an error it releases everything it made and
// returns the first cause.
package shardload
