"""PyTorch reference of chorus's tensor-parallel decoder (model/decoder).

The same model, parameter names, layouts and sharding as chorus
(docs/model.md, "The decoder"): matrices are [in, out] (a layer computes
x @ W), or [out, in] with "layout": "hf" in the config (x @ W.T, as
nn.Linear stores them); wq/wk/wv and w_gate/w_up are split by output
features (columns of [in, out], rows of [out, in]), wo and w_down by
input features, the embedding, the norms and lm_head are replicated; one
all-reduce after attention and one after the MLP (torch.distributed,
NCCL). The math is the same for every world size: run it unsharded (one
process) and compare chorus on 1, 2 and 4 workers with the same output
(model/decoder TestAgainstPyTorch, CHORUS_DECODER_WORKERS).

Weights: --model DIR reads DIR/config.json (model/decoder.Config's JSON)
and every DIR/*.safetensors file (safetensors' torch loader, or a small
reader of the format when the package is missing); --random SEED makes
the random model chorus's decoder.RandomWeights makes with that seed (the
same hash, so no files are needed), with --config FILE or the defaults of
decoder.Small.

Run:  python3 bench/decoder_ref.py --random 11 --out ref.json
      torchrun --nproc-per-node 2 bench/decoder_ref.py --model DIR --out ref.json

It runs a greedy generation (prefill of the prompt, then --steps decode
steps) and writes, on rank 0, --out: {"config", "world", "prompt",
"tokens", "logits": [last-row logits of the prefill, then of every decode
step]}. Then it times (unless --no-bench): prefill tokens/s, decode
ms/token eager and with the decode step captured as a CUDA graph, peak
memory per rank; printed as JSON lines on stdout (rank 0).

Attention reads the whole cache with a mask of the rows past each
token's position (static shapes, so the decode step can be captured);
rotary angles are computed in float64 as chorus does.
"""
import argparse
import glob
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
SMALL = {"vocab": 64, "hidden": 64, "layers": 2, "heads": 8, "kv_heads": 4, "ffn": 128, "max_seq": 16,
         "dtype": "float32", "norm_eps": 1e-5, "rope_theta": 10000.0, "norm": "rms", "activation": "silu"}
REPLICATE, COLS, ROWS = 0, 1, 2


def hf_layout(c):
    layout = c.get("layout", "chorus")
    if layout not in ("chorus", "hf"):
        sys.exit("decoder_ref: layout %r (chorus or hf)" % layout)
    return layout == "hf"


def params(c):
    """(name, full shape as stored, split, transposed) in
    model/decoder.Config.Params order; transposed: stored [out, in]."""
    h, v, f = c["hidden"], c["vocab"], c["ffn"]
    d = h // c["heads"]
    q, kv = c["heads"] * d, c["kv_heads"] * d
    layer = c.get("norm", "rms") == "layer"
    hf = hf_layout(c)
    out = [("embed", (v, h), REPLICATE, False)]

    def norm(w, b):
        out.append((w, (h,), REPLICATE, False))
        if layer:
            out.append((b, (h,), REPLICATE, False))

    def lin(name, fin, fout, split):
        if hf:
            split = {COLS: ROWS, ROWS: COLS}.get(split, split)
            out.append((name, (fout, fin), split, True))
        else:
            out.append((name, (fin, fout), split, False))

    for i in range(c["layers"]):
        p = "layers.%d." % i
        norm(p + "attn_norm.weight", p + "attn_norm.bias")
        lin(p + "attn.wq", h, q, COLS)
        lin(p + "attn.wk", h, kv, COLS)
        lin(p + "attn.wv", h, kv, COLS)
        lin(p + "attn.wo", q, h, ROWS)
        norm(p + "mlp_norm.weight", p + "mlp_norm.bias")
        lin(p + "mlp.w_gate", h, f, COLS)
        lin(p + "mlp.w_up", h, f, COLS)
        lin(p + "mlp.w_down", f, h, ROWS)
    norm("norm.weight", "norm.bias")
    lin("lm_head", h, v, REPLICATE)
    return out


# --- decoder.RandomParam in numpy (uint64 arithmetic wraps) -------------
M64 = (1 << 64) - 1


def _splitmix(z):
    z = z + np.uint64(0x9e3779b97f4a7c15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
    return z ^ (z >> np.uint64(31))


def _fnv64a(s):
    h = 0xcbf29ce484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001b3) & M64
    return h


def random_param(name, shape, seed):
    """The full random parameter as float64 (before rounding to the dtype)."""
    with np.errstate(over="ignore"):
        salt = _splitmix(np.array([_fnv64a(name)], dtype=np.uint64))[0]
        n = int(np.prod(shape))
        base = np.uint64((seed * 0x100000001b3) & M64) ^ salt
        u = _splitmix(base ^ np.arange(n, dtype=np.uint64))
    x = (u >> np.uint64(11)).astype(np.float64) / float(1 << 53) * 2 - 1
    if name.endswith(".weight"):
        x = 1 + 0.1 * x
    elif name.endswith(".bias"):
        x = 0.1 * x
    elif name != "embed":
        x = x / math.sqrt(shape[0])
    return x.reshape(shape)


# --- safetensors -------------------------------------------------------
ST_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def read_safetensors(path):
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except ImportError:
        pass
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=ST_DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"])
    return out


def shard(t, split, rank, world):
    if split == COLS:
        n = t.shape[-1] // world
        return t[..., rank * n:(rank + 1) * n]
    if split == ROWS:
        n = t.shape[0] // world
        return t[rank * n:(rank + 1) * n]
    return t


def load_weights(args, c, rank, world, dev):
    dt = DTYPES[c["dtype"]]
    full = {}
    if args.model:
        for path in sorted(glob.glob(os.path.join(args.model, "*.safetensors"))):
            full.update(read_safetensors(path))
    w = {}
    for name, shape, split, transposed in params(c):
        if args.model:
            if name not in full:
                sys.exit("decoder_ref: %s has no tensor %r" % (args.model, name))
            t = full[name]
            if tuple(t.shape) != tuple(shape):
                sys.exit("decoder_ref: %s is %s, want %s" % (name, tuple(t.shape), shape))
            t = t.to(dt)
        elif transposed:
            # The values of the [in, out] parameter (decoder.RandomParam
            # of the HF layout is the transpose of the chorus one).
            t = torch.from_numpy(np.ascontiguousarray(random_param(name, shape[::-1], args.random).T)).to(dt)
        else:
            t = torch.from_numpy(random_param(name, shape, args.random)).to(dt)
        w[name] = shard(t, split, rank, world).contiguous().to(dev)
    return w


# --- the model ----------------------------------------------------------
class Decoder:
    def __init__(self, c, w, world, dev):
        self.c, self.w, self.world, self.dev = c, w, world, dev
        self.dt = DTYPES[c["dtype"]]
        self.d = c["hidden"] // c["heads"]
        self.hq, self.hkv = c["heads"] // world, c["kv_heads"] // world
        s = c["max_seq"]
        self.kc = [torch.zeros(s, self.hkv, self.d, dtype=self.dt, device=dev) for _ in range(c["layers"])]
        self.vc = [torch.zeros(s, self.hkv, self.d, dtype=self.dt, device=dev) for _ in range(c["layers"])]
        i = torch.arange(self.d // 2, dtype=torch.float64, device=dev)
        self.inv_freq = torch.pow(torch.tensor(c["rope_theta"], dtype=torch.float64, device=dev), -2 * i / self.d)
        self.rows = torch.arange(s, device=dev)
        self.hf = hf_layout(c)

    def lin(self, x, name):
        """x times the matrix name: x @ W ([in, out]) or x @ W.T ([out, in])."""
        w = self.w[name]
        return x @ (w.t() if self.hf else w)

    def norm(self, x, prefix):
        x32 = x.float()
        if self.c.get("norm", "rms") == "layer":
            x32 = x32 - x32.mean(-1, keepdim=True)
            y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.c["norm_eps"]) * self.w[prefix + ".weight"].float()
            y = y + self.w[prefix + ".bias"].float()
        else:
            y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.c["norm_eps"]) * self.w[prefix + ".weight"].float()
        return y.to(self.dt)

    def rope(self, x, pos):  # x [T, heads, d]
        ang = pos.double()[:, None] * self.inv_freq[None, :]
        c, s = torch.cos(ang).float()[:, None, :], torch.sin(ang).float()[:, None, :]
        h = self.d // 2
        x1, x2 = x[..., :h].float(), x[..., h:].float()
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1).to(self.dt)

    def allreduce(self, x):
        if self.world > 1:
            dist.all_reduce(x)
        return x

    def step(self, ids, pos):
        """Logits [T, vocab] for tokens ids at positions pos (int64 tensors)."""
        t = ids.shape[0]
        h = self.w["embed"][ids]
        group = self.hq // self.hkv
        mask = self.rows[None, :] <= pos[:, None]  # [T, S]
        for l in range(self.c["layers"]):
            p = "layers.%d." % l
            x = self.norm(h, p + "attn_norm")
            q = self.rope(self.lin(x, p + "attn.wq").view(t, self.hq, self.d), pos)
            k = self.rope(self.lin(x, p + "attn.wk").view(t, self.hkv, self.d), pos)
            v = self.lin(x, p + "attn.wv").view(t, self.hkv, self.d)
            self.kc[l].index_copy_(0, pos, k)
            self.vc[l].index_copy_(0, pos, v)
            kk = self.kc[l].float().repeat_interleave(group, dim=1)  # [S, hq, d]
            vv = self.vc[l].float().repeat_interleave(group, dim=1)
            scores = torch.einsum("thd,shd->hts", q.float(), kk) / math.sqrt(self.d)
            scores = scores.masked_fill(~mask[None], float("-inf"))
            a = torch.einsum("hts,shd->thd", torch.softmax(scores, -1), vv).to(self.dt)
            h = h + self.allreduce(self.lin(a.reshape(t, self.hq * self.d), p + "attn.wo"))
            x = self.norm(h, p + "mlp_norm")
            g = self.lin(x, p + "mlp.w_gate")
            if self.c.get("activation", "silu") == "gelu":
                g = torch.nn.functional.gelu(g.float(), approximate="tanh").to(self.dt)
            else:
                g = torch.nn.functional.silu(g.float()).to(self.dt)
            h = h + self.allreduce(self.lin(g * self.lin(x, p + "mlp.w_up"), p + "mlp.w_down"))
        return self.lin(self.norm(h, "norm"), "lm_head")


def sync():
    torch.cuda.synchronize()
    if dist.is_initialized():
        dist.barrier()


# ---------------------------------------------------------------------------
# --bench-decode: the PyTorch anchors of `chorus bench decode` (one GPU).
#
# The same shapes, dtype and batch as chorus's rows, written the way
# gpt-fast writes a Llama decode step: weights [out, in] (nn.Linear's
# layout), a static KV cache [B, kv_heads, max_seq, head_dim] written with
# index_copy_, scaled_dot_product_attention over the whole cache with a
# mask of the rows past the position (static shapes), rotary tables
# precomputed. max_seq is ctx + the steps, so a row reads about ctx rows
# of cache (gpt-fast sizes its cache to the prompt and the new tokens).
# Three ways to run the step: eager (one Python call per step), graph
# (the step captured once with torch.cuda.CUDAGraph, replayed), compile
# (torch.compile(mode="max-autotune"): Inductor's fused kernels, GEMMs
# autotuned, and CUDA graphs). Prints JSON lines
# {"bench":"decode","what":"anchor","mode":"torch-eager",...,"ms":...}.

PRESETS = {"llama3-8b": dict(vocab=128256, hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, rope_theta=500000.0)}


class StaticDecoder(torch.nn.Module):
    """Every tensor is a registered buffer, as gpt-fast's KVCache and
    nn.Linear weights are module state: torch.compile's CUDA graphs treat
    module state as static (no copies), and accept the cache writes."""

    def __init__(self, c, batch, max_seq, dtype, dev, seed=0):
        super().__init__()
        g = torch.Generator(device=dev)
        g.manual_seed(seed)
        h, d = c["hidden"], c["hidden"] // c["heads"]
        self.c, self.d, self.dtype = c, d, dtype
        self.hq, self.hkv = c["heads"], c["kv_heads"]

        def u(shape, scale):
            return ((torch.rand(shape, generator=g, device=dev, dtype=torch.float32) * 2 - 1) * scale).to(dtype)

        def buf(name, t):
            self.register_buffer(name, t, persistent=False)

        buf("embed", u((c["vocab"], h), 1.0))
        self.nl = c["layers"]
        for i in range(self.nl):
            buf("an%d" % i, 1 + u((h,), 0.1))
            buf("wq%d" % i, u((self.hq * d, h), h ** -0.5))
            buf("wk%d" % i, u((self.hkv * d, h), h ** -0.5))
            buf("wv%d" % i, u((self.hkv * d, h), h ** -0.5))
            buf("wo%d" % i, u((h, self.hq * d), (self.hq * d) ** -0.5))
            buf("mn%d" % i, 1 + u((h,), 0.1))
            buf("wg%d" % i, u((c["ffn"], h), h ** -0.5))
            buf("wu%d" % i, u((c["ffn"], h), h ** -0.5))
            buf("wd%d" % i, u((h, c["ffn"]), c["ffn"] ** -0.5))
            buf("kc%d" % i, torch.zeros(batch, self.hkv, max_seq, d, dtype=dtype, device=dev))
            buf("vc%d" % i, torch.zeros(batch, self.hkv, max_seq, d, dtype=dtype, device=dev))
        buf("norm", 1 + u((h,), 0.1))
        buf("lm_head", u((c["vocab"], h), h ** -0.5))
        inv = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, d, 2, device=dev, dtype=torch.float64) / d))
        ang = torch.arange(max_seq, device=dev, dtype=torch.float64)[:, None] * inv[None, :]
        buf("cos", ang.cos().to(torch.float32))
        buf("sin", ang.sin().to(torch.float32))
        buf("mask", torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool, device=dev)))
        self.eps = 1e-5

    def rms(self, x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * w

    def rope(self, x, pos):  # x [B, T, heads, d]
        half = self.d // 2
        c, s = self.cos[pos][None, :, None, :], self.sin[pos][None, :, None, :]
        x1, x2 = x[..., :half].float(), x[..., half:].float()
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1).to(x.dtype)

    def step(self, ids, pos):  # ids [B, T], pos [T]
        F = torch.nn.functional
        B, T = ids.shape
        x = F.embedding(ids, self.embed)
        mask = self.mask[pos][None, None]  # [1, 1, T, max_seq]
        for i in range(self.nl):
            hn = self.rms(x, getattr(self, "an%d" % i))
            q = F.linear(hn, getattr(self, "wq%d" % i)).view(B, T, self.hq, self.d)
            k = F.linear(hn, getattr(self, "wk%d" % i)).view(B, T, self.hkv, self.d)
            v = F.linear(hn, getattr(self, "wv%d" % i)).view(B, T, self.hkv, self.d)
            q, k = self.rope(q, pos), self.rope(k, pos)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            getattr(self, "kc%d" % i).index_copy_(2, pos, k)
            getattr(self, "vc%d" % i).index_copy_(2, pos, v)
            a = F.scaled_dot_product_attention(q, getattr(self, "kc%d" % i), getattr(self, "vc%d" % i), attn_mask=mask, enable_gqa=True)
            x = x + F.linear(a.transpose(1, 2).reshape(B, T, self.hq * self.d), getattr(self, "wo%d" % i))
            hn = self.rms(x, getattr(self, "mn%d" % i))
            x = x + F.linear(F.silu(F.linear(hn, getattr(self, "wg%d" % i))) * F.linear(hn, getattr(self, "wu%d" % i)), getattr(self, "wd%d" % i))
        logits = F.linear(self.rms(x, self.norm), self.lm_head)
        return logits, logits.argmax(-1)

    def forward(self, ids, pos):
        return self.step(ids, pos)


def bench_decode_main(argv):
    ap = argparse.ArgumentParser(description="PyTorch anchors of chorus bench decode")
    ap.add_argument("--bench-decode", action="store_true")
    ap.add_argument("--preset", default="llama3-8b", choices=sorted(PRESETS))
    for k in ("layers", "hidden", "heads", "kv-heads", "ffn", "vocab"):
        ap.add_argument("--" + k, type=int)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--batch", default="1")
    ap.add_argument("--ctx", default="128,4096")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--modes", default="eager,graph,compile")
    ap.add_argument("--compile-mode", default="max-autotune")
    args = ap.parse_args(argv)
    c = dict(PRESETS[args.preset])
    for k in ("layers", "hidden", "heads", "kv-heads", "ffn", "vocab"):
        v = getattr(args, k.replace("-", "_"))
        if v is not None:
            c[k.replace("-", "_")] = v
    dtype, dev = DTYPES[args.dtype], torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    name = torch.cuda.get_device_name(dev)
    modes = args.modes.split(",")
    for batch in [int(b) for b in args.batch.split(",")]:
        for ctx in [int(x) for x in args.ctx.split(",")]:
            max_seq = ctx + args.warmup + args.steps + 8
            m = StaticDecoder(c, batch, max_seq, dtype, dev)
            with torch.no_grad():
                # the cache holds ctx rows: a prefill of ctx tokens
                for p0 in range(0, ctx, 512):
                    t = min(512, ctx - p0)
                    ids = torch.randint(0, c["vocab"], (batch, t), device=dev)
                    m.step(ids, torch.arange(p0, p0 + t, device=dev))
                torch.cuda.synchronize()
                for mode in modes:
                    ids = torch.ones(batch, 1, dtype=torch.long, device=dev)
                    pos = torch.tensor([ctx], device=dev)
                    t_compile = 0.0
                    if mode == "eager":
                        def run(p):
                            pos.fill_(p)
                            return m.step(ids, pos)
                    elif mode == "graph":
                        s = torch.cuda.Stream()
                        s.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(s):
                            for _ in range(2):
                                m.step(ids, pos)
                        torch.cuda.current_stream().wait_stream(s)
                        gr = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(gr):
                            out = m.step(ids, pos)

                        def run(p):
                            pos.fill_(p)
                            gr.replay()
                            return out
                    elif mode == "compile":
                        f = torch.compile(m, mode=args.compile_mode, fullgraph=True)
                        t0 = time.perf_counter()
                        for _ in range(3):
                            f(ids, pos)
                        torch.cuda.synchronize()
                        t_compile = time.perf_counter() - t0

                        def run(p):
                            pos.fill_(p)
                            return f(ids, pos)
                    else:
                        sys.exit("decoder_ref: --modes: %r (eager, graph, compile)" % mode)
                    for i in range(args.warmup):
                        run(ctx + i)
                    torch.cuda.synchronize()
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    for i in range(args.steps):
                        run(ctx + args.warmup + i)
                    e1.record()
                    torch.cuda.synchronize()
                    ms = e0.elapsed_time(e1) / args.steps
                    rec = {"bench": "decode", "what": "anchor", "mode": "torch-" + mode, "batch": batch, "ctx": ctx,
                           "ms": ms, "tokens_per_s": batch * 1e3 / ms, "dtype": args.dtype, "device": name,
                           "torch": torch.__version__, "config": c}
                    if mode == "compile":
                        rec["compile_s"] = t_compile
                        rec["compile_mode"] = args.compile_mode
                    print(json.dumps(rec), flush=True)
            del m
            torch.cuda.empty_cache()


def main():
    if "--bench-decode" in sys.argv[1:]:
        return bench_decode_main(sys.argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="folder with config.json and *.safetensors")
    ap.add_argument("--random", type=int, help="chorus's random model with this seed")
    ap.add_argument("--config", help="config.json for --random (default: decoder.Small)")
    ap.add_argument("--dtype", help="override the config's dtype (float32, float16, bfloat16)")
    ap.add_argument("--prompt", default="3,17,42")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out", default="decoder_ref.json")
    ap.add_argument("--iters", type=int, default=50, help="timed decode steps / prefills")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                    help="auto: cuda when available; cpu runs any world size (gloo), e.g. 4 ranks on a 1-GPU machine")
    args = ap.parse_args()
    if (args.model is None) == (args.random is None):
        sys.exit("decoder_ref: give exactly one of --model DIR and --random SEED")

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available() or local >= torch.cuda.device_count():
            sys.exit("decoder_ref: rank %d needs cuda:%d, this machine has %d GPUs (NCCL takes one GPU per rank): "
                     "run one process (the math does not depend on the world size) or --device cpu"
                     % (rank, local, torch.cuda.device_count() if torch.cuda.is_available() else 0))
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world > 1:
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", device_id=dev if dev.type == "cuda" else None)
    if args.model:
        with open(os.path.join(args.model, "config.json")) as f:
            c = json.load(f)
    elif args.config:
        with open(args.config) as f:
            c = json.load(f)
    else:
        c = dict(SMALL)
    if args.dtype:
        c["dtype"] = args.dtype
    torch.backends.cuda.matmul.allow_tf32 = False  # chorus's cuBLAS float32 has no TF32 either
    w = load_weights(args, c, rank, world, dev)
    m = Decoder(c, w, world, dev)

    prompt = [int(x) for x in args.prompt.split(",")]
    t = len(prompt)
    with torch.no_grad():
        logits = m.step(torch.tensor(prompt, device=dev), torch.arange(t, device=dev))
        rows = [logits[-1].float().cpu().tolist()]
        tokens = [int(logits[-1].argmax())]
        for i in range(args.steps):
            lg = m.step(torch.tensor([tokens[-1]], device=dev), torch.tensor([t + i], device=dev))
            rows.append(lg[-1].float().cpu().tolist())
            tokens.append(int(lg[-1].argmax()))
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"config": c, "seed": args.random, "model": args.model, "world": world, "prompt": prompt, "tokens": tokens, "logits": rows}, f)
        print(json.dumps({"what": "tokens", "world": world, "tokens": tokens}), flush=True)
    if args.no_bench or dev.type != "cuda":
        return

    base = {"config": "%s L%d H%d heads%d/%d ffn%d" % (c["dtype"], c["layers"], c["hidden"], c["heads"], c["kv_heads"], c["ffn"]),
            "world": world, "device": torch.cuda.get_device_name(dev)}
    with torch.no_grad():
        # Prefill: the whole cache length minus one decode slot.
        pt = max(1, c["max_seq"] - 1)
        pids = torch.randint(0, c["vocab"], (pt,), device=dev)
        ppos = torch.arange(pt, device=dev)
        for _ in range(3):
            m.step(pids, ppos)
        sync()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            m.step(pids, ppos)
        sync()
        dt = (time.perf_counter() - t0) / args.iters
        report(rank, dict(base, what="prefill", tokens=pt, ms=dt * 1e3, tokens_per_s=pt / dt))

        # Decode eager: one token at a rotating position.
        ids = torch.zeros(1, dtype=torch.long, device=dev)
        pos = torch.zeros(1, dtype=torch.long, device=dev)
        for i in range(3):
            m.step(ids, pos)
        sync()
        t0 = time.perf_counter()
        for i in range(args.iters):
            pos.fill_(i % c["max_seq"])
            m.step(ids, pos)
        sync()
        report(rank, dict(base, what="decode", graph=False, ms_per_token=(time.perf_counter() - t0) / args.iters * 1e3))

        # Decode as a CUDA graph: static ids/pos buffers, written before
        # every replay.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                m.step(ids, pos)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = m.step(ids, pos)
        sync()
        t0 = time.perf_counter()
        for i in range(args.iters):
            pos.fill_(i % c["max_seq"])
            g.replay()
        sync()
        report(rank, dict(base, what="decode", graph=True, ms_per_token=(time.perf_counter() - t0) / args.iters * 1e3))
        del out
    report(rank, dict(base, what="memory", peak_bytes=torch.cuda.max_memory_allocated(dev)), every_rank=True)
    if dist.is_initialized():
        dist.destroy_process_group()


def report(rank, rec, every_rank=False):
    if every_rank:
        rec["rank"] = rank
    if rank == 0 or every_rank:
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
