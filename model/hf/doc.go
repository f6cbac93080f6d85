// Package hf loads Hugging Face decoder checkpoints (a folder written by
// transformers' save_pretrained: config.json, model.safetensors or
// shards with model.safetensors.index.json) onto a session, sharded over
// its workers, as a model/decoder model.
//
// ParseConfig reads config.json (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM; transformers 4's rope_theta/rope_scaling and 5's
// rope_parameters spellings) and Config.Decoder turns it into a
// decoder.Config for a worker count and a context length, refusing, with
// the field named, whatever chorus would compute differently from
// transformers. Open checks the checkpoint's tensor names, shapes and
// dtypes against it on the controller (headers only: nothing is loaded
// when anything is wrong). Load maps the Hugging Face names onto the
// decoder's parameters (Names) and its tensor-parallel sharding (Spec),
// loads them with model/shardload (each worker reads its own byte
// ranges) and makes the decoder. WriteRandom writes a random checkpoint
// in the same layout, fast, for tests and benchmarks.
package hf
