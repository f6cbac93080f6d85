#!/usr/bin/env python3
"""Generate golden.json for the model/chat Go package.

Renders every template in this folder (*.jinja) over a table of
conversations with Hugging Face transformers'
tokenizer.apply_chat_template(messages, tokenize=False, ...) and writes the
expected strings (or the expected error) to a JSON file.

Usage (needs transformers; run where it is installed):

    cd model/chat/testdata && python3 gen.py --out golden.json

--backend jinja renders with plain jinja2 configured the way transformers
configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, its tojson/raise_exception/strftime_now). It exists only to
check this script where transformers is not installed; golden.json must come
from --backend transformers.
"""

import argparse
import datetime
import json
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> (bos_token, eos_token); None leaves the token unset.
TEMPLATES = {
    "llama2": ("<s>", "</s>"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3_1": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3_2": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen2": (None, "<|im_end|>"),
    "qwen2_5": (None, "<|im_end|>"),
    "qwen3": (None, "<|im_end|>"),
    "mistral_v0_1": ("<s>", "</s>"),
    "mistral_v0_2": ("<s>", "</s>"),
    "mistral_system": ("<s>", "</s>"),
    "mistral_v0_3": ("<s>", "</s>"),
    "chatml": ("<s>", "<|im_end|>"),
    "zephyr": ("<s>", "</s>"),
    "gemma": ("<bos>", "<eos>"),
    "gemma3": ("<bos>", "<eos>"),
    "phi3": ("<s>", "<|endoftext|>"),
    "deepseek_r1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
}

# Templates written for this package to exercise Jinja features; rendered
# over FEATURE_CONVERSATIONS only.
FEATURE_TEMPLATES = ["features_ws", "features_crlf", "features_loop", "features_filters",
                     "features_expr", "features_json"]
FEATURE_CONVERSATIONS = ["multi", "system_multi", "unicode", "empty_all", "assistant_last"]
for _name in FEATURE_TEMPLATES:
    TEMPLATES[_name] = ("<s>", "</s>")


def S(c):
    return {"role": "system", "content": c}


def U(c):
    return {"role": "user", "content": c}


def A(c):
    return {"role": "assistant", "content": c}


def T(c):
    return {"role": "tool", "content": c}


CONVERSATIONS = {
    "user": [U("Hello!")],
    "system_user": [S("You are a helpful assistant."), U("Hello!")],
    "multi": [U("Hi"), A("Hello! How can I help?"), U("Tell me a joke.")],
    "system_multi": [S("Be brief."), U("Hi"), A("Hello."), U("What is 2+2?"), A("4")],
    "assistant_last": [U("Q?"), A("A.")],
    "empty": [U("")],
    "empty_all": [S(""), U(""), A(""), U("")],
    "unicode": [
        U("héllo wörld — 世界 🚀\nsecond line\n\n\tindented"),
        A("  ¿Qué tal?  \n"),
        U("Ω≈ç√∫ \u00a0nbsp\u2028sep\r\nCRLF"),
    ],
    "whitespace": [S("  padded system \n"), U("\n  padded user  \n\n"), A(" padded answer ")],
    "template_text": [U("{{ not a template }} {% if x %} {# c #} '\"\\ \\n [INST] </s>")],
    "system_only": [S("Only a system prompt.")],
    "non_alternating": [U("one"), U("two")],
    "assistant_first": [A("I speak first."), U("ok")],
    "tool_role": [U("Weather in Paris?"), A("Let me check."), T('{"temp": 20, "unit": "C"}'), U("Thanks")],
    "think": [U("2+2?"), A("<think>\nadd them\n</think>\n\n4"), U("and 3+3?")],
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather — in °C or °F",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": 'City, e.g. "Paris"'},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "number", "default": 0.5},
                    "b": {"type": "integer", "default": -3, "nullable": None, "strict": True},
                },
                "required": [],
                "x-meta": {},
            },
            "return": {"type": "number"},
        },
    },
]

TOOL_TEMPLATES = ["llama3_1", "llama3_2", "qwen2_5", "qwen3", "mistral_v0_3"]
TOOL_CONVERSATIONS = ["user", "system_multi", "tool_role", "system_only"]


def cases():
    """Yield (case name, template name, messages, add_generation_prompt, vars)."""
    for tname in TEMPLATES:
        if tname in FEATURE_TEMPLATES:
            for cname in FEATURE_CONVERSATIONS:
                for agp in (False, True):
                    yield (f"{tname}/{cname}/{'gen' if agp else 'nogen'}", tname,
                           CONVERSATIONS[cname], agp, {})
            continue
        for cname, msgs in CONVERSATIONS.items():
            for agp in (False, True):
                yield f"{tname}/{cname}/{'gen' if agp else 'nogen'}", tname, msgs, agp, {}
    for tname in TOOL_TEMPLATES:
        for cname in TOOL_CONVERSATIONS:
            for agp in (False, True):
                yield (f"{tname}/{cname}/tools/{'gen' if agp else 'nogen'}", tname,
                       CONVERSATIONS[cname], agp, {"tools": TOOLS})
    for cname in ("user", "system_multi"):
        yield (f"llama3_1/{cname}/tools_in_system", "llama3_1", CONVERSATIONS[cname], True,
               {"tools": TOOLS, "tools_in_user_message": False})
        yield (f"llama3_1/{cname}/builtin_tools", "llama3_1", CONVERSATIONS[cname], True,
               {"tools": TOOLS, "builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]})
        yield (f"llama3_1/{cname}/builtin_only", "llama3_1", CONVERSATIONS[cname], True,
               {"builtin_tools": ["code_interpreter", "brave_search"]})
        for t in ("llama3_1", "llama3_2"):
            yield (f"{t}/{cname}/date_string", t, CONVERSATIONS[cname], True,
                   {"date_string": "01 Jan 2025"})
    yield "features_json/multi/tools", "features_json", CONVERSATIONS["multi"], True, {"tools": TOOLS}
    for cname in ("user", "think"):
        yield (f"qwen3/{cname}/no_thinking", "qwen3", CONVERSATIONS[cname], True,
               {"enable_thinking": False})
        yield (f"qwen3/{cname}/thinking", "qwen3", CONVERSATIONS[cname], True,
               {"enable_thinking": True})


def read_template(name):
    with open(os.path.join(HERE, name + ".jinja"), encoding="utf-8", newline="") as f:
        return f.read()


class TransformersBackend:
    """Renders through tokenizer.apply_chat_template, as a user would."""

    def __init__(self, direct=False):
        import transformers  # noqa: F401  (fails loudly when missing)

        self.transformers = transformers
        self.version = transformers.__version__
        self.path = None
        self._tok = {}
        # Probe the tokenizer route once; fall back to the library's own
        # render function if this transformers cannot build a bare tokenizer
        # (or when direct is set).
        try:
            if direct:
                raise RuntimeError("direct render requested")
            tok = self._make_tokenizer("<s>", "</s>")
            out = self._apply(tok, "{{ bos_token }}{{ messages[0]['content'] }}", [U("x")], False, {})
            if out != "<s>x":
                raise RuntimeError(f"probe rendered {out!r}")
            self.path = "tokenizer.apply_chat_template (" + type(tok).__name__ + ")"
        except Exception as e:  # noqa: BLE001
            print(f"tokenizer route failed ({type(e).__name__}: {e}); using render_jinja_template", file=sys.stderr)
            from transformers.utils.chat_template_utils import render_jinja_template

            self.render_jinja_template = render_jinja_template
            self.path = "transformers.utils.chat_template_utils.render_jinja_template"

    def _make_tokenizer(self, bos, eos):
        import tokenizers

        kw = {}
        if bos is not None:
            kw["bos_token"] = bos
        if eos is not None:
            kw["eos_token"] = eos
        obj = tokenizers.Tokenizer(tokenizers.models.BPE())
        try:
            from transformers import PreTrainedTokenizerFast as cls
        except ImportError:
            from transformers import TokenizersBackend as cls
        return cls(tokenizer_object=obj, **kw)

    def _apply(self, tok, template, msgs, agp, extra):
        out = tok.apply_chat_template(
            msgs, chat_template=template, tokenize=False, return_dict=False,
            add_generation_prompt=agp, **extra)
        if isinstance(out, list) and len(out) == 1:
            out = out[0]
        if not isinstance(out, str):
            raise RuntimeError(f"apply_chat_template returned {type(out).__name__}, not str")
        return out

    def render(self, tname, template, msgs, agp, extra):
        bos, eos = TEMPLATES[tname]
        if self.path.startswith("tokenizer"):
            key = (bos, eos)
            if key not in self._tok:
                self._tok[key] = self._make_tokenizer(bos, eos)
            return self._apply(self._tok[key], template, msgs, agp, extra)
        kw = dict(extra)
        tools = kw.pop("tools", None)
        if bos is not None:
            kw["bos_token"] = bos
        if eos is not None:
            kw["eos_token"] = eos
        out = self.render_jinja_template(
            conversations=[msgs], tools=tools, chat_template=template,
            add_generation_prompt=agp, **kw)
        if isinstance(out, tuple):
            out = out[0]
        return out[0]


class JinjaBackend:
    """Plain jinja2 set up like transformers' _compile_jinja_template; for
    checking this script only."""

    def __init__(self):
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        def strftime_now(format):
            return datetime.datetime.now().strftime(format)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = strftime_now
        self.env = env
        self.version = None
        self.path = "jinja2 emulation of transformers' environment (NOT transformers)"

    def render(self, tname, template, msgs, agp, extra):
        bos, eos = TEMPLATES[tname]
        kw = dict(extra)
        kw.setdefault("tools", None)
        if bos is not None:
            kw["bos_token"] = bos
        if eos is not None:
            kw["eos_token"] = eos
        return self.env.from_string(template).render(
            messages=msgs, documents=None, add_generation_prompt=agp, **kw)


def render_case(backend, tname, template, msgs, agp, extra):
    """Render once; retry if the local date changed while rendering."""
    for _ in range(3):
        before = datetime.datetime.now()
        try:
            out, err = backend.render(tname, template, [dict(m) for m in msgs], agp, extra), None
        except Exception as e:  # noqa: BLE001
            out, err = None, e
        after = datetime.datetime.now()
        if before.date() == after.date():
            break
    return before, out, err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "golden.json"),
                    help="output file, or a folder to write golden.json into")
    ap.add_argument("--backend", choices=["transformers", "transformers-render", "jinja"], default="transformers",
                    help="transformers: tokenizer.apply_chat_template (falls back to render_jinja_template); "
                         "transformers-render: transformers' render_jinja_template directly; "
                         "jinja: plain jinja2 emulation (script check only)")
    args = ap.parse_args()
    out_path = args.out
    if os.path.isdir(out_path):
        out_path = os.path.join(out_path, "golden.json")

    if args.backend == "jinja":
        backend = JinjaBackend()
    else:
        backend = TransformersBackend(direct=args.backend == "transformers-render")
    import jinja2

    meta = {
        "generator": "model/chat/testdata/gen.py",
        "backend": args.backend,
        "render_path": backend.path,
        "transformers_version": backend.version,
        "jinja2_version": jinja2.__version__,
        "python_version": platform.python_version(),
        "generated_at": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    print(json.dumps(meta, indent=1), file=sys.stderr)

    templates = {name: read_template(name) for name in TEMPLATES}
    out_cases = []
    n_err = 0
    for cname, tname, msgs, agp, extra in cases():
        now, out, err = render_case(backend, tname, templates[tname], msgs, agp, extra)
        bos, eos = TEMPLATES[tname]
        case = {
            "name": cname,
            "template": tname,
            "bos_token": bos,
            "eos_token": eos,
            "messages": msgs,
            "add_generation_prompt": agp,
            "vars": extra,
            "now": now.isoformat(timespec="seconds"),
        }
        if err is None:
            case["expected"] = out
        else:
            n_err += 1
            case["error_type"] = type(err).__name__
            case["error"] = str(err)
        out_cases.append(case)

    doc = dict(meta)
    doc["templates"] = {name: {"bos_token": b, "eos_token": e} for name, (b, e) in TEMPLATES.items()}
    doc["cases"] = out_cases
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {out_path}: {len(out_cases)} cases, {n_err} expected errors", file=sys.stderr)
    errs = {}
    for c in out_cases:
        if "error" in c:
            errs.setdefault((c["error_type"], c["error"]), []).append(c["name"])
    for (et, e), names in sorted(errs.items()):
        print(f"  {et}: {e[:90]!r} x{len(names)} e.g. {names[0]}", file=sys.stderr)


if __name__ == "__main__":
    main()
