// Package shard loads a rank's part of each tensor of a safetensors
// checkpoint (Disco's ShardLoader): a Spec says, per parameter name (exact
// name, glob or regular expression), whether every rank gets the whole
// tensor (replicate), an equal part along one dimension (split; dim 0 is
// rows, dim 1 columns), or what a registered Func computes (for example
// the "fused" function for fused QKV weights, where each rank takes its
// part of each of q, k and v).
//
// A Plan is the list of byte ranges of the tensor that make up the rank's
// part, in row-major order of the result, coalesced: a row split is one
// range, a column split one range per row. The Loader reads exactly those
// ranges with positional reads ((*os.File).ReadAt), into host tensors or,
// through a Staging pair of pinned host buffers, into GPU memory; Stats
// counts the bytes it read, so tests prove that the ranks together read
// each byte of a split tensor exactly once (a replicated tensor is read
// once per rank).
//
// Dtypes are never converted silently: a rule may say which dtype it
// expects (ErrDType otherwise), and may ask for float32 to be converted
// to float16 or bfloat16 on load. Every tensor's plan is computed when the
// Loader is made, so a bad spec (a rule that matches nothing, a dimension
// not divisible by the number of ranks, an unknown function) fails at
// once, naming the tensor and the rule, before any data is read.
package shard
