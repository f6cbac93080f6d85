// Package decoder is a tensor-parallel transformer decoder (Llama-style:
// RMSNorm or LayerNorm, rotary embeddings, grouped-query attention with a
// KV cache per worker, a gated MLP with SiLU or GELU) built with the
// compiler/ir builder and run by compiler/vm on every worker of a session.
//
// Sharding is Megatron's: the query, key and value projections and the
// gate and up projections are split by columns (whole heads, whole FFN
// slices) over n workers, the attention output and down projections by
// rows; every worker then holds partial sums of the residual update,
// completed by one all-reduce after attention and one after the MLP
// (on GPUs the IPC rewrite makes them custom all-reduces). With more
// workers than kv heads, each kv head is replicated on the workers whose
// query heads read it. Embedding and norms are replicated; the LM head is
// split by vocabulary (Config.LMHead, the default) and the logits
// gathered by one more all-reduce, or replicated; either way every worker
// ends with the same logits and the same greedy token.
//
// Build emits @prefill (T tokens) and @decode (one token): both take the
// token ids and their positions as int32 tensors, then the parameters in
// Config.Params order, then the KV caches (and a split head's placement
// and mask), and return the logits and the argmax tokens. Positions are data, not constants, so the decode step is
// one program for every position and can be captured as a CUDA graph and
// replayed after writing the next id and position into the same buffers
// (Model.CaptureDecode / ReplayDecode). With Options.Batch B, every
// function takes B equal runs of tokens, one per sequence, over caches
// [B, max_seq, kv_heads/n, head_dim] (BuildBatch): B sequences of one
// length decode together (DecodeBatch, ReplayDecodeBatch), reading the
// weights once per step.
//
// Reference is the same model in float64 on the full (unsharded)
// weights, single process, for tests; bench/decoder_ref.py is the same
// model in PyTorch. docs/model.md ("The decoder") has the parameter
// names, layouts and tolerances.
package decoder
