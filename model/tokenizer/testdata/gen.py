#!/usr/bin/env python3
"""Make the golden data of chorus/model/tokenizer with Hugging Face `tokenizers`.

    cd model/tokenizer/testdata && PYTHONUNBUFFERED=1 python3 gen.py --out /tmp/out
    tar -xzf /tmp/out/testdata.tar.gz -C model/tokenizer/testdata

Deterministic and offline.  It builds a mixed corpus of about 1.2 MB (slices of
the Python standard library's sources and docstrings, sentences in a dozen
scripts, emoji, whitespace runs, digits, contractions and the special tokens'
literal strings), trains small BPE models on it with `tokenizers`, writes
tokenizer.json files shaped like the Llama 3, Qwen2, GPT-2, Llama 2 and
Mistral ones (plus `flags`, a GPT-2 variant with added-token flags, Lowercase,
NFKC and Digits), and records, per document, the ids of encode() and the
strings of decode().  It also times the library on the corpus with one thread
(reference_speed.json).  Everything lands in --out as testdata.tar.gz, next
to gen.log.
"""
import os

# One thread everywhere: timings are single-core, training is reproducible.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import gzip  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import sysconfig  # noqa: E402
import tarfile  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sentences import (  # noqa: E402
    CONTRACTIONS, DIGITS, EMOJI, PUNCT, SENTENCES, WHITESPACE, WORDS)

try:
    import tokenizers
    from tokenizers import Tokenizer, trainers
except ImportError:  # the script logic can still be checked without it
    tokenizers = Tokenizer = trainers = None

SEED = 20240611
TARGET_BYTES = 1_250_000

LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIAL_LITERALS = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
    "<|end_header_id|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>",
    "</tool_call>", "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "<mask>", "<sep>",
    "[both]", "[both]]", "HELLO", "<|im_sta", "<s", "[INST", "<|eot_id|", " <mask>",
    "<sep> ", "  <mask>  ", "\n<sep>\n", "<s><s>", "[INST][/INST]", "<0x41>", "<0xZZ>",
]

LOG = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.append(s)


# ---------------------------------------------------------------- corpus

def stdlib_sources():
    d = sysconfig.get_paths()["stdlib"]
    out = []
    for name in sorted(os.listdir(d)):
        if not name.endswith(".py"):
            continue
        try:
            with open(os.path.join(d, name), encoding="utf-8") as f:
                out.append((name, f.read()))
        except (OSError, UnicodeDecodeError):
            continue
    return d, out


def code_docs(rng, sources, target):
    docs, total, rounds = [], 0, 0
    while total < target and rounds < 20:
        rounds += 1
        for _, text in sources:
            lines = text.splitlines(keepends=True)
            if len(lines) < 5:
                continue
            start = rng.randrange(len(lines))
            doc = "".join(lines[start:start + rng.randint(2, 90)])
            if not doc.strip():
                continue
            r = rng.random()
            if r < 0.08:
                doc = doc.replace("\n", "\r\n")
            elif r < 0.14:
                doc = doc.replace("    ", "\t")
            elif r < 0.18:
                doc = doc.rstrip("\n") + rng.choice(["   ", "\t", " \n\n\n", "  \r\n"])
            docs.append(doc)
            total += len(doc.encode())
            if total >= target:
                break
    return docs


def prose_docs(rng, stdlib_dir, sources, target):
    pool = []
    for _, text in sources:
        for m in re.finditer(r'"""(.*?)"""', text, re.S):
            s = textwrap.dedent(m.group(1)).strip()
            if len(s) >= 80:
                pool.append(s)
    lic = os.path.join(stdlib_dir, "LICENSE.txt")
    if os.path.exists(lic):
        with open(lic, encoding="utf-8", errors="replace") as f:
            pool.extend(p.strip() for p in f.read().split("\n\n") if len(p.strip()) >= 80)
    docs, total = [], 0
    while pool and total < target:
        k = rng.randint(1, 4)
        doc = "\n\n".join(rng.choice(pool) for _ in range(k))
        docs.append(doc)
        total += len(doc.encode())
    return docs


def multilingual_docs(rng, target):
    langs = sorted(SENTENCES)
    docs, total = [], 0
    while total < target:
        if rng.random() < 0.25:
            parts = [rng.choice(SENTENCES[rng.choice(langs)]) for _ in range(rng.randint(2, 10))]
        else:
            lang = rng.choice(langs)
            parts = [rng.choice(SENTENCES[lang]) for _ in range(rng.randint(1, 14))]
        out = []
        for p in parts:
            out.append(p)
            r = rng.random()
            if r < 0.1:
                out.append(rng.choice(EMOJI))
            elif r < 0.18:
                out.append(" " + rng.choice(DIGITS) + " ")
            elif r < 0.24:
                out.append(" " + rng.choice(WORDS) + " ")
            out.append(rng.choice(["", " ", " ", "\n", "  ", "\u3000", "\n\n"]))
        doc = "".join(out)
        docs.append(doc)
        total += len(doc.encode())
    return docs


def edge_docs(rng, target):
    pools = [WORDS, WORDS, WORDS, EMOJI, WHITESPACE, WHITESPACE, DIGITS, CONTRACTIONS,
             SPECIAL_LITERALS, PUNCT, PUNCT]
    docs, total = [], 0
    while total < target:
        n = rng.randint(1, 60)
        out = []
        for _ in range(n):
            out.append(rng.choice(rng.choice(pools)))
            out.append(rng.choice(["", "", " ", " ", " ", "  ", "\n", "\t"]))
        if rng.random() < 0.05:
            out.append(rng.choice([" " * rng.randint(20, 400), "\n" * rng.randint(5, 50),
                                   "9" * rng.randint(20, 300), "a" * rng.randint(300, 900),
                                   "😀" * rng.randint(10, 80), "-" * rng.randint(50, 300)]))
        doc = "".join(out)
        docs.append(doc)
        total += len(doc.encode())
    return docs


FIXED_DOCS = [
    "", " ", "  ", "\n", "\n\n\n", "\r\n", "\t", "a", "hello", " hello", "hello ",
    "hello  world", "hello   world   ", "a\tb", "x \n y", "x  \n\n  y", "   leading",
    "trailing   ", "\u00a0\u00a0x", "\u3000日本", "I'LL DON'T we'Re she's", "'s's's",
    "1234567", "12 345 6789", "abc123def", "😀😀", "👨‍👩‍👧‍👦 family", "🇺🇸🇯🇵",
    "e\u0301 \u00e9", "\u212b \u00c5", "ﬁ", "\x00\x01\x02", "<s>", "</s>", "<unk>",
    "<s>hello</s>", " <s> hello </s> ", "[INST] hi [/INST]", "[INST][/INST]",
    "<|begin_of_text|>hi<|eot_id|>", "<|im_start|>user\nhi<|im_end|>\n",
    "<|endoftext|><|endoftext|>", "<mask>", "  <mask>  x", "x  <mask>", "<sep>  y",
    "a<sep>b", "[both]", " [both] ", "[both]]", "HELLO hello Hello ohello hello_world",
    "hello!", "say hello", "<tool_call>{\"a\": 1}</tool_call>", "\u2581hello \u2581",
    "<0x41>", "line1\r\nline2\r\n\r\n", "tab\t\tsep", "end\n", " \n \n ", "!!\n\n",
    "x" * 600, " " * 300 + "x", "9" * 40,
]


def build_corpus():
    rng = random.Random(SEED)
    stdlib_dir, sources = stdlib_sources()
    log("stdlib:", stdlib_dir, "files:", len(sources))
    docs = []
    docs += code_docs(rng, sources, 560_000)
    docs += prose_docs(rng, stdlib_dir, sources, 240_000)
    docs += multilingual_docs(rng, 270_000)
    docs += edge_docs(rng, 150_000)
    total = sum(len(d.encode()) for d in docs)
    while total < TARGET_BYTES:
        extra = multilingual_docs(rng, 20_000) + edge_docs(rng, 20_000)
        docs += extra
        total += sum(len(d.encode()) for d in extra)
    rng.shuffle(docs)
    docs = FIXED_DOCS + docs
    # Python str may hold lone surrogates; UTF-8 text cannot.
    docs = [d.encode("utf-8", "replace").decode("utf-8") for d in docs]
    return docs


# ---------------------------------------------------------------- tokenizers

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_ALPHABET = sorted(bytes_to_unicode().values())


def bpe_model(vocab, merges, **kw):
    m = {"type": "BPE", "dropout": None, "unk_token": None,
         "continuing_subword_prefix": None, "end_of_word_suffix": None,
         "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
         "vocab": vocab, "merges": merges}
    m.update(kw)
    return m


def added(id_, content, special=True, normalized=False, lstrip=False, rstrip=False,
          single_word=False):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


def spec(model, normalizer=None, pre_tokenizer=None, post_processor=None, decoder=None,
         added_tokens=()):
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": list(added_tokens), "normalizer": normalizer,
            "pre_tokenizer": pre_tokenizer, "post_processor": post_processor,
            "decoder": decoder, "model": model}


def byte_level(add_prefix_space=False, trim_offsets=True, use_regex=True):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space,
            "trim_offsets": trim_offsets, "use_regex": use_regex}


def split_regex(pat):
    return {"type": "Split", "pattern": {"Regex": pat}, "behavior": "Isolated", "invert": False}


def template(single, special):
    """single: list of "$A" or special-token strings; special: {content: id}."""
    pieces = []
    for p in single:
        if p == "$A":
            pieces.append({"Sequence": {"id": "A", "type_id": 0}})
        else:
            pieces.append({"SpecialToken": {"id": p, "type_id": 0}})
    pair = pieces + [{"Sequence": {"id": "B", "type_id": 1}}]
    return {"type": "TemplateProcessing", "single": pieces, "pair": pair,
            "special_tokens": {k: {"id": k, "ids": [v], "tokens": [k]}
                               for k, v in special.items()}}


def train(docs, normalizer, pre_tokenizer, **trainer_kw):
    """Trains a BPE model; returns (vocab in id order, merges as pairs)."""
    t = Tokenizer.from_str(json.dumps(spec(bpe_model({}, []), normalizer, pre_tokenizer)))
    tr = trainers.BpeTrainer(show_progress=False, special_tokens=[], **trainer_kw)
    t.train_from_iterator(docs, trainer=tr)
    m = json.loads(t.to_str())["model"]
    vocab = [tok for tok, _ in sorted(m["vocab"].items(), key=lambda kv: kv[1])]
    merges = [x.split(" ", 1) if isinstance(x, str) else list(x) for x in m["merges"]]
    return vocab, merges


def as_legacy(merges):
    for a, b in merges:
        assert " " not in a and " " not in b, (a, b)
    return [a + " " + b for a, b in merges]


def make_llama3(docs):
    pre = {"type": "Sequence", "pretokenizers": [
        split_regex(LLAMA3_PAT), byte_level(False, True, False)]}
    vocab, merges = train(docs, None, pre, vocab_size=8000, min_frequency=2,
                          initial_alphabet=BYTE_ALPHABET)
    v = {t: i for i, t in enumerate(vocab)}
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
             "<|start_header_id|>", "<|end_header_id|>"]
    toks = [added(len(v) + i, n) for i, n in enumerate(names)]
    post = {"type": "Sequence", "processors": [
        byte_level(True, False, True),
        template(["<|begin_of_text|>", "$A"], {"<|begin_of_text|>": len(v)})]}
    return spec(bpe_model(v, as_legacy(merges), ignore_merges=True), None, pre, post,
                byte_level(True, True, True), toks)


def make_qwen2(docs):
    pre = {"type": "Sequence", "pretokenizers": [
        split_regex(QWEN2_PAT), byte_level(False, False, False)]}
    norm = {"type": "NFC"}
    vocab, merges = train(docs, norm, pre, vocab_size=8000, min_frequency=2,
                          initial_alphabet=BYTE_ALPHABET)
    v = {t: i for i, t in enumerate(vocab)}
    toks = [added(len(v), "<|endoftext|>"), added(len(v) + 1, "<|im_start|>"),
            added(len(v) + 2, "<|im_end|>"),
            added(len(v) + 3, "<tool_call>", special=False),
            added(len(v) + 4, "</tool_call>", special=False)]
    return spec(bpe_model(v, merges), norm, pre, byte_level(False, False, False),
                byte_level(False, False, False), toks)


def gpt2_base(docs):
    pre = byte_level(False, True, True)
    vocab, merges = train(docs, None, pre, vocab_size=6000, min_frequency=2,
                          initial_alphabet=BYTE_ALPHABET)
    v = {t: i for i, t in enumerate(vocab)}
    return v, merges


def make_gpt2(base):
    v, merges = dict(base[0]), base[1]
    eot = len(v)
    v["<|endoftext|>"] = eot
    return spec(bpe_model(v, as_legacy(merges), continuing_subword_prefix="",
                          end_of_word_suffix=""),
                None, byte_level(False, True, True), byte_level(True, False, True),
                byte_level(True, True, True), [added(eot, "<|endoftext|>", normalized=True)])


def make_flags(base):
    v, merges = dict(base[0]), base[1]
    n = len(v)
    toks = [added(n, "<|endoftext|>", normalized=True),
            added(n + 1, "<mask>", lstrip=True),
            added(n + 2, "<sep>", rstrip=True),
            added(n + 3, "HELLO", special=False, normalized=True, single_word=True),
            added(n + 4, "[both]", lstrip=True, rstrip=True),
            added(n + 5, "[both]]", special=False),
            added(n + 6, "<s>", single_word=True)]
    norm = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, byte_level(True, True, True)]}
    post = template(["<|endoftext|>", "$A", "<|endoftext|>"], {"<|endoftext|>": n})
    return spec(bpe_model(v, merges), norm, pre, post, byte_level(True, True, True), toks)


def sp_vocab(docs, control, vocab_size, limit_alphabet):
    """SentencePiece-style vocab: control tokens, the 256 <0xNN> tokens, then BPE."""
    pre = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
           "split": True}
    vocab, merges = train(docs, None, pre, vocab_size=vocab_size, min_frequency=2,
                          limit_alphabet=limit_alphabet)
    v = {}
    for t in control + ["<0x%02X>" % b for b in range(256)] + vocab:
        if t not in v:
            v[t] = len(v)
    return v, merges


def make_llama2(docs):
    v, merges = sp_vocab(docs, ["<unk>", "<s>", "</s>"], 7800, 220)
    norm = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    dec = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    toks = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")]
    return spec(bpe_model(v, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True),
                norm, None, template(["<s>", "$A"], {"<s>": 1}), dec, toks)


def make_mistral(docs):
    control = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]
    v, merges = sp_vocab(docs, control, 6500, 400)
    meta = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
            "split": False}
    dec = {"type": "Sequence", "decoders": [meta, {"type": "ByteFallback"}, {"type": "Fuse"}]}
    toks = [added(i, c) for i, c in enumerate(control)]
    return spec(bpe_model(v, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True),
                None, meta, template(["<s>", "$A"], {"<s>": 1}), dec, toks)


# ---------------------------------------------------------------- golden data

def gz_bytes(lines):
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as f:
        for line in lines:
            f.write(line.encode("utf-8"))
            f.write(b"\n")
    return buf.getvalue()


def dumps(o):
    return json.dumps(o, ensure_ascii=False, separators=(",", ":"))


def golden_lines(name, tok, docs, n_ids):
    yield dumps({"name": name, "docs": len(docs),
                 "tokenizers": getattr(tokenizers, "__version__", "?")})
    ntok = 0
    for i, doc in enumerate(docs):
        ids = tok.encode(doc, add_special_tokens=False).ids
        ntok += len(ids)
        rec = {"i": i, "ids": ids}
        if i % 7 == 0:
            rec["ids_s"] = tok.encode(doc, add_special_tokens=True).ids
        d = tok.decode(ids, skip_special_tokens=False)
        ds = tok.decode(ids, skip_special_tokens=True)
        rec["d"] = None if d == doc else d
        rec["ds"] = None if ds == d else ds
        yield dumps(rec)
    # Random id sequences: lossy UTF-8, byte fallback, unknown and special ids.
    rng = random.Random(SEED + len(name))
    for k in range(300):
        seq = []
        for _ in range(rng.randint(1, 24)):
            r = rng.random()
            if r < 0.4:
                seq.append(rng.randrange(0, min(n_ids, 270)))
            elif r < 0.9:
                seq.append(rng.randrange(0, n_ids))
            elif r < 0.97:
                seq.append(rng.randrange(max(0, n_ids - 8), n_ids))
            else:
                seq.append(n_ids + rng.randrange(0, 50))
        yield dumps({"r": k, "ids": seq, "d": tok.decode(seq, skip_special_tokens=False),
                     "ds": tok.decode(seq, skip_special_tokens=True)})
    log(f"  {name}: {len(docs)} docs, {ntok} tokens")


def best_of(fn, reps=3):
    best = None
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best
    return best


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def speed(name, tok, docs, nbytes):
    res = {}
    mb = nbytes / 1e6
    enc = tok.encode_batch(docs, add_special_tokens=False)
    ids = [e.ids for e in enc]
    res["encode_batch_MBps"] = mb / best_of(lambda: tok.encode_batch(docs, add_special_tokens=False))
    if hasattr(tok, "encode_batch_fast"):
        res["encode_batch_fast_MBps"] = mb / best_of(
            lambda: tok.encode_batch_fast(docs, add_special_tokens=False))
    res["encode_loop_MBps"] = mb / best_of(
        lambda: [tok.encode(d, add_special_tokens=False) for d in docs])
    res["decode_batch_MBps"] = mb / best_of(lambda: tok.decode_batch(ids, skip_special_tokens=False))
    res["decode_loop_MBps"] = mb / best_of(
        lambda: [tok.decode(x, skip_special_tokens=False) for x in ids])
    res = {k: round(v, 3) for k, v in res.items()}
    res["tokens"] = sum(len(x) for x in ids)
    log(f"  speed {name}: {res}")
    return res


# ---------------------------------------------------------------- pre-tokenizer cases

GPT2_PAT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
CASE_CHARS = list("aZzsStTlLrReEvVmMdD1709.!-_(") + ["'"] * 6 + [
    " ", " ", " ", " ", "\t", "\n", "\n", "\r", "\x0b", "\x0c", "\x85", "\u00a0", "\u1680",
    "\u2000", "\u200a", "\u200b", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
    "\u017f", "\u212a", "\u0130", "é", "e\u0301", "ß", "日", "本", "한", "ع", "ה", "я",
    "Ω", "ก", "\u0e31", "क", "\u093f", "٣", "²", "½", "Ⅻ", "１", "😀", "👍🏽", "\u200d",
    "\ufe0f", "€", "\u2019", "\x00", "\x1f", "\x7f", "\U0001d518", "ǅ", "ª", "µ",
]


def pretok_lines():
    """Splits of the known regexes (as Split/Isolated) on random short strings."""
    rng = random.Random(SEED + 7)
    texts = []
    for _ in range(3000):
        texts.append("".join(rng.choice(CASE_CHARS) for _ in range(rng.randint(1, 16))))
    for name, pat in (("gpt2", GPT2_PAT), ("llama3", LLAMA3_PAT), ("qwen2", QWEN2_PAT)):
        tok = Tokenizer.from_str(json.dumps(spec(bpe_model({}, []), None, split_regex(pat))))
        for t in texts:
            yield dumps({"p": name, "s": t,
                         "out": [x for x, _ in tok.pre_tokenizer.pre_tokenize_str(t)]})


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="folder for testdata.tar.gz and gen.log")
    ap.add_argument("--corpus-only", action="store_true", help="only build and report the corpus")
    ap.add_argument("--no-speed", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    versions = {"python": sys.version.split()[0], "platform": platform.platform(),
                "cpu": cpu_name(), "tokenizers": getattr(tokenizers, "__version__", None)}
    try:
        import transformers  # noqa: F401
        versions["transformers"] = transformers.__version__
    except Exception:  # noqa: BLE001
        versions["transformers"] = None
    log("versions:", json.dumps(versions))

    t0 = time.time()
    docs = build_corpus()
    nbytes = sum(len(d.encode()) for d in docs)
    log(f"corpus: {len(docs)} docs, {nbytes} bytes, {time.time() - t0:.1f}s")
    files = {"corpus.jsonl.gz": gz_bytes(dumps(d) for d in docs)}
    if args.corpus_only or Tokenizer is None:
        log("tokenizers not importable or --corpus-only: stopping after the corpus")
        write_out(args.out, files)
        return 0 if args.corpus_only else 1

    try:
        files["pretok.jsonl.gz"] = gz_bytes(pretok_lines())
    except Exception:  # noqa: BLE001
        log("pretok cases FAILED\n" + traceback.format_exc())
    makers = [("llama3", make_llama3), ("qwen2", make_qwen2), ("gpt2", None),
              ("flags", None), ("llama2", make_llama2), ("mistral", make_mistral)]
    speeds, failed, base = {}, [], None
    for name, mk in makers:
        t1 = time.time()
        try:
            if name in ("gpt2", "flags"):
                if base is None:
                    base = gpt2_base(docs)
                js = make_gpt2(base) if name == "gpt2" else make_flags(base)
            else:
                js = mk(docs)
            text = json.dumps(js, ensure_ascii=False, indent=1 if name == "llama3" else None)
            tok = Tokenizer.from_str(text)  # the library must accept it as written
            n_ids = max([i for i in js["model"]["vocab"].values()] +
                        [t["id"] for t in js["added_tokens"]]) + 1
            files[f"{name}/tokenizer.json"] = text.encode("utf-8")
            files[f"{name}/golden.jsonl.gz"] = gz_bytes(golden_lines(name, tok, docs, n_ids))
            if not args.no_speed:
                speeds[name] = speed(name, tok, docs, nbytes)
            log(f"  {name}: done in {time.time() - t1:.1f}s")
        except Exception:  # noqa: BLE001
            failed.append(name)
            log(f"  {name}: FAILED\n" + traceback.format_exc())
    files["reference_speed.json"] = json.dumps({
        "library": "tokenizers", "versions": versions, "threads": 1,
        "env": {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"},
        "corpus_docs": len(docs), "corpus_bytes": nbytes,
        "method": "best of 3 passes over the corpus; MB/s = corpus bytes / seconds; "
                  "encode without special tokens, decode with skip_special_tokens=False",
        "results": speeds}, indent=1).encode()
    files["versions.json"] = json.dumps(versions, indent=1).encode()
    write_out(args.out, files)
    log(f"total {time.time() - t0:.1f}s, failed: {failed}")
    return 1 if failed else 0


def write_out(out, files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name in sorted(files):
            data = files[name]
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
            tf.addfile(ti, io.BytesIO(data))
    with open(os.path.join(out, "testdata.tar.gz"), "wb") as f:
        f.write(buf.getvalue())
    sizes = {k: len(v) for k, v in sorted(files.items())}
    log("wrote", os.path.join(out, "testdata.tar.gz"), len(buf.getvalue()), "bytes:",
        json.dumps(sizes))
    with open(os.path.join(out, "gen.log"), "w") as f:
        f.write("\n".join(LOG) + "\n")


if __name__ == "__main__":
    sys.exit(main())
