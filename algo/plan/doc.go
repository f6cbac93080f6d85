// Package plan is the in-memory model of an MSCCL++ execution plan (the JSON
// file that MSCCL++'s Python DSL emits and its executor loads) together with
// its reader and writer, a structural checker, and the one place that says
// what every operation reads and writes.
//
// The pieces:
//
//   - Plan, GPU, ThreadBlock, Channel, RemoteBuffer, Semaphore, Op, BufRef:
//     the plan, field for field as in the JSON (docs/plans.md lists
//     every field and its JSON name).
//   - Read / Parse decode a plan; (*Plan).Write / Marshal encode it as
//     stable, indented JSON that MSCCL++'s executor loads. Decoding is
//     strict: an unknown op name, channel type, buffer type, reduce op or
//     JSON field is an error that names the gpu, thread block and op.
//   - (*Plan).Validate checks the structure (ranks, chunk ranges, channel
//     and remote-buffer references, barrier and semaphore ids, op fields
//     against the op kind); every error wraps ErrInvalid.
//   - (*Plan).Access / OpAccess: the chunks an op reads and writes, on which
//     rank, resolved through the thread block's channel and remote-buffer
//     tables. The verifier and the executors use this and nothing else, so
//     they agree on the semantics.
//   - (*Plan).Layout: chunk index -> byte range for a given message size,
//     with MSCCL++'s alignment and thread-block-group slicing rules.
//   - (*Plan).Traffic: the bytes a rank's ops read and write in a call,
//     in its own memory and in its peers', packets at their size.
//   - (*Plan).Show: a listing for people, one op per line.
//
// Indices in an op are two levels deep, as in MSCCL++: an op's channel_ids
// index the thread block's own list of channels of the op's channel type,
// whose entries are the GPU's channel ids; a remote buffer reference's
// buffer_id indexes the thread block's remote_buffer_refs of the op's
// channel type, whose entries index the GPU's remote_buffers. The helpers
// TBChannel, ChannelPeer, RemoteBufferOf and SwitchGroupOf resolve them.
//
// The package depends on the standard library only.
package plan
