#!/usr/bin/env python3
"""Tiny Hugging Face checkpoints and transformers' outputs for model/hf's tests.

Builds three tiny random decoders with transformers (seeded, float32):
  llama3   LlamaForCausalLM, llama3 rotary scaling, head_dim 24 (not hidden/heads),
           GQA, byte-level BPE tokenizer (Llama 3 style)
  qwen2    Qwen2ForCausalLM: q/k/v biases, tied embeddings, byte-level BPE (Qwen2 style)
  mistral  MistralForCausalLM, sliding_window 32 (every context here fits in it), 4 kv
           heads (splits over 4 workers), SentencePiece-style BPE (byte fallback)
  llama3_d128  llama3's shape of attention at Llama-3-8B's head dim: head_dim 128, 8 heads
           over 2 kv heads (4 a kv head), so that the GPU's tensor-core attention kernels
           (head dims 64 and 128) run, with a fourth prompt of more than 16 tokens (the
           prefill kernel takes 16 or more tokens a sequence)
saves each with save_pretrained (safetensors) and its tokenizer (tokenizer.json,
tokenizer_config.json with a chat template), and writes golden.json: for a few
prompts the prompt ids, transformers' greedy continuation (16 new tokens,
do_sample=False) and the logits of the first and the last step, in float32 on
the CPU and in float16 and bfloat16 (on the GPU when there is one, else the CPU);
the rotary table (inv_freq) of each model; the ids of one chat conversation
rendered by the template.

Usage: python3 gen.py [OUTDIR [NAME...]]   (default: this script's folder, every model;
with names, only those are rebuilt and their entries replaced in OUTDIR's golden.json)
Needs torch, transformers (5.x; 4.4x works), tokenizers, safetensors.
"""
import copy
import json
import os
import sys

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM)

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))

TEXT = """The quick brown fox jumps over the lazy dog. A tensor-parallel decoder splits
its attention heads and its MLP over the workers; each worker holds whole heads.
Rotary embeddings turn pairs of features by angles that grow with the position.
Grouped-query attention shares one key and value head among several query heads.
Hello, world! How are you today? I am fine, thank you. 12345 + 678 = 13023.
Le café est très bon. Ünïcödé text: naïve façade, smörgåsbord, 東京, 🙂.
def main():\n    print("hello")\n    return 0\n""" * 3

PROMPTS = ["The quick brown fox", "Rotary embeddings turn pairs", "Hello, world! 東京 🙂"]
LONG_PROMPT = ("Grouped-query attention shares one key and value head among several query heads. "
               "Rotary embeddings turn pairs of features by angles that grow with the position.")
MODELS = ["llama3", "qwen2", "mistral", "llama3_d128"]
CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello, world!"}]
NEW = 16

LLAMA3_TEMPLATE = ("{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
                   "{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
                   "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
CHATML_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
MISTRAL_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}[INST] {{ message['content'] }} [/INST]"
                    "{% elif message['role'] == 'assistant' %}{{ message['content'] }}{{ eos_token }}{% endif %}{% endfor %}")


def byte_level_tokenizer(specials, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT], trainer)
    return tok


def sentencepiece_tokenizer(vocab_size):
    """Llama 2 / Mistral style: <unk> <s> </s>, 256 byte tokens <0x00>..<0xFF>, then BPE pieces over ▁-words."""
    t = Tokenizer(models.BPE(unk_token="<unk>"))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    t.train_from_iterator([TEXT], trainer)
    js = json.loads(t.to_str())
    trained = js["model"]["vocab"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in sorted(trained.items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in js["model"]["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return tok


def wrap(tok, bos, eos, template, add_bos):
    from tokenizers import processors
    if add_bos:
        bos_id = tok.token_to_id(bos)
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, unk_token=None)
    fast.chat_template = template
    return fast


def build(name):
    torch.manual_seed({"llama3": 1, "qwen2": 2, "mistral": 3, "llama3_d128": 4}[name])
    common = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
                  max_position_embeddings=256, rms_norm_eps=1e-5, initializer_range=0.25, hidden_act="silu")
    head_dim = 24
    if name == "llama3_d128":
        head_dim = 128
        common.update(hidden_size=128, num_attention_heads=8, intermediate_size=192)
    if name.startswith("llama3"):
        tok = byte_level_tokenizer(["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], 320)
        fast = wrap(tok, "<|begin_of_text|>", "<|eot_id|>", LLAMA3_TEMPLATE, True)
        rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), head_dim=head_dim, rope_theta=500000.0, rope_scaling=dict(rope),
                          tie_word_embeddings=False, bos_token_id=tok.token_to_id("<|begin_of_text|>"),
                          eos_token_id=[tok.token_to_id("<|end_of_text|>"), tok.token_to_id("<|eot_id|>")], **common)
        if getattr(cfg, "rope_parameters", None) is not None and cfg.rope_parameters.get("rope_type") != "llama3":
            cfg.rope_parameters = dict(rope, rope_theta=500000.0)
        model = LlamaForCausalLM(cfg)
    elif name == "qwen2":
        tok = byte_level_tokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>"], 300)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
        fast.chat_template = CHATML_TEMPLATE
        cfg = Qwen2Config(vocab_size=tok.get_vocab_size(), rope_theta=1000000.0, tie_word_embeddings=True,
                          use_sliding_window=False, sliding_window=64, max_window_layers=2,
                          bos_token_id=None, eos_token_id=tok.token_to_id("<|im_end|>"), **common)
        model = Qwen2ForCausalLM(cfg)
    else:
        tok = sentencepiece_tokenizer(300)
        fast = wrap(tok, "<s>", "</s>", MISTRAL_TEMPLATE, True)
        # 4 kv heads (no grouping) so that this one splits over 4 workers.
        cfg = MistralConfig(vocab_size=tok.get_vocab_size(), rope_theta=10000.0, sliding_window=32, tie_word_embeddings=False,
                            bos_token_id=1, eos_token_id=2, **dict(common, num_key_value_heads=4))
        model = MistralForCausalLM(cfg)
    model = model.float().eval()
    return model, fast


def greedy(model, ids, device, dtype):
    """transformers' greedy continuation and the logits of its first and last steps."""
    # A copy: Module.to converts in place, and every run must start from
    # the saved float32 weights (rounded once to its dtype).
    m = copy.deepcopy(model).to(device=device, dtype=dtype)
    x = torch.tensor([ids], device=device)
    gc = transformers.GenerationConfig(max_new_tokens=NEW, min_new_tokens=0, do_sample=False, eos_token_id=None, pad_token_id=0,
                                       output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        out = m.generate(x, generation_config=gc, attention_mask=torch.ones_like(x))
        new = out.sequences[0, len(ids):].tolist()
        logits = [l[0].float().cpu() for l in out.logits]
        # The same by full forward passes (no cache): a check on generate.
        seq = list(ids)
        for _ in range(NEW):
            seq.append(int(m(torch.tensor([seq], device=device)).logits[0, -1].float().argmax()))
    assert len(new) == NEW, f"generate stopped after {len(new)} tokens"
    if seq[len(ids):] != new:
        print(f"  note: {dtype} no-cache greedy differs from generate's: {seq[len(ids):]} vs {new}")
    top2 = [float(torch.topk(l, 2).values[0] - torch.topk(l, 2).values[1]) for l in logits]
    return {"new_ids": new, "first_logits": logits[0].tolist(), "last_logits": logits[-1].tolist(), "min_margin": min(top2)}


def main():
    names = sys.argv[2:] or MODELS
    for name in names:
        if name not in MODELS:
            sys.exit(f"gen.py: unknown model {name!r} (models: {', '.join(MODELS)})")
    golden = {"transformers": transformers.__version__, "torch": torch.__version__, "new_tokens": NEW, "models": {}}
    gp = os.path.join(OUT, "golden.json")
    if sys.argv[2:] and os.path.exists(gp):
        golden["models"] = json.load(open(gp))["models"]  # the other models' entries stay
    gpu = torch.cuda.is_available()
    for name in names:
        model, tok = build(name)
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        tok.save_pretrained(d)
        for extra in ["special_tokens_map.json", "vocab.json", "merges.txt", "chat_template.jinja"]:
            p = os.path.join(d, extra)
            if os.path.exists(p) and extra != "chat_template.jinja":
                os.remove(p)
        # Keep the template in tokenizer_config.json, where model/chat reads it.
        tc_path = os.path.join(d, "tokenizer_config.json")
        tc = json.load(open(tc_path))
        if "chat_template" not in tc:
            tc["chat_template"] = tok.chat_template
            json.dump(tc, open(tc_path, "w"), indent=2, ensure_ascii=False)
        jp = os.path.join(d, "chat_template.jinja")
        if os.path.exists(jp):
            os.remove(jp)
        # Greedy runs must not stop at an eos: 16 new tokens every time
        # (the saved generation_config.json keeps the eos ids).
        model.generation_config.eos_token_id = None
        rot = model.model.rotary_emb
        entry = {"architecture": type(model).__name__, "inv_freq": rot.inv_freq.float().tolist(),
                 "rope_type": getattr(rot, "rope_type", None), "prompts": [],
                 "chat_ids": tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True)}
        if hasattr(entry["chat_ids"], "keys"):
            entry["chat_ids"] = list(entry["chat_ids"]["input_ids"])
        for text in PROMPTS + ([LONG_PROMPT] if name == "llama3_d128" else []):
            ids = tok(text)["input_ids"]
            p = {"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True)}
            p["float32"] = greedy(model, ids, "cpu", torch.float32)
            for dt, tdt in [("float16", torch.float16), ("bfloat16", torch.bfloat16)]:
                p[dt] = greedy(model, ids, "cuda" if gpu else "cpu", tdt)
                p[dt]["device"] = "cuda" if gpu else "cpu"
            p["float32"]["text"] = tok.decode(p["float32"]["new_ids"])
            entry["prompts"].append(p)
            print(f"{name}: {text!r} -> {len(ids)} ids, new {p['float32']['new_ids']} (margin {p['float32']['min_margin']:.3g}); "
                  f"f16 {'same' if p['float16']['new_ids'] == p['float32']['new_ids'] else p['float16']['new_ids']}, "
                  f"bf16 {'same' if p['bfloat16']['new_ids'] == p['float32']['new_ids'] else p['bfloat16']['new_ids']}")
        golden["models"][name] = entry
    with open(gp, "w") as f:
        json.dump(golden, f, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
