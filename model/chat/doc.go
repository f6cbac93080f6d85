// Package chat renders Hugging Face chat templates (the Jinja
// "chat_template" of tokenizer_config.json) in pure Go, producing the same
// bytes as transformers'
//
//	tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=...)
//
// It is a small Jinja2 interpreter (lexer, parser to an AST, evaluator)
// that models the Python values and operations templates use.
//
//	cfg, err := chat.LoadTokenizerConfig("tokenizer_config.json")
//	...
//	prompt, err := cfg.Render([]chat.Message{{Role: "user", Content: "Hi"}},
//		chat.Options{AddGenerationPrompt: true})
//
// # Environment
//
// Templates run as transformers runs them: jinja2's
// ImmutableSandboxedEnvironment with trim_blocks=True, lstrip_blocks=True
// and keep_trailing_newline=False, the loopcontrols extension (break,
// continue) and transformers' {% generation %} tag; transformers' tojson
// (json.dumps with ensure_ascii=False, indent, separators, sort_keys),
// raise_exception(msg) and strftime_now(fmt) (local time, or Options.Now).
// The variables are messages (a list of {"role", "content"} dicts), tools
// (None unless Options.Tools), documents (None), add_generation_prompt,
// bos_token and eos_token (undefined when empty) and Options.Vars.
// Undefined variables behave as jinja2's default Undefined.
//
// # Supported
//
//   - Syntax: {{ }}, {% %}, {# #}, {% raw %}, whitespace control with "-"
//     and "+" on either side, CR/CRLF newlines.
//   - Statements: if/elif/else, for (tuple targets, an "if" filter, else,
//     loop.index/index0/revindex/revindex0/first/last/length/previtem/
//     nextitem/depth/cycle()/changed()), break, continue, set (names,
//     tuples, namespace attributes ns.x, block set with filters),
//     generation.
//   - Expressions: literals (strings with Python escapes, ints in any base,
//     floats, lists, tuples, dicts, true/false/none), + - * / // % ** ~,
//     comparisons and chains, in / not in, and/or/not, inline if/else,
//     attribute and item access, slicing, calls with keyword arguments,
//     filters and tests with or without arguments.
//   - Functions: range, dict, namespace, raise_exception, strftime_now.
//   - Filters: abs, attr, capitalize, count, d, default, first, float,
//     indent, int, items, join, last, length, list, lower, map, max, min,
//     reject, rejectattr, replace, reverse, round, select, selectattr, sort,
//     string, sum, title, tojson, trim, unique, upper.
//   - Tests: defined, undefined, none, true, false, boolean, integer, float,
//     number, string, mapping, iterable, sequence, callable, lower, upper,
//     odd, even, divisibleby, sameas, in, filter, test, eq/equalto/==,
//     ne/!=, lt/lessthan/<, le/<=, gt/greaterthan/>, ge/>=.
//   - Methods: str.strip/lstrip/rstrip/split/rsplit/splitlines/startswith/
//     endswith/upper/lower/title/capitalize/replace/find/rfind/index/
//     rindex/count/join/removeprefix/removesuffix/partition/rpartition/
//     isdigit/isalpha/isalnum/isspace/islower/isupper, dict.get/items/keys/
//     values/copy, list.index/count/copy. Mutating methods raise the
//     sandbox's SecurityError as in transformers.
//
// Values print as Python prints them (True, None, ['a'], {'k': 1}, 1.0,
// 1e+16), strings are indexed by code point, and the filters that return
// generators in Jinja (map, select, reject, selectattr, rejectattr, items,
// unique, reverse) return one-shot iterators with the same truthiness,
// len() and consumption behaviour.
//
// # Refused
//
// Everything else is refused with an error matching ErrUnsupported
// (*UnsupportedError) that names the construct and its line: at Parse for
// tags (macro, call, filter, include, import, from, extends, block, with,
// do, print, ...), unknown or unsupported filters and tests (e.g. safe,
// format, groupby, escaped), recursive loops, *args/**kwargs and \N{...}
// escapes; at Render for unsupported methods (str.format, str.zfill, ...)
// and functions (cycler, joiner, lipsum), string % formatting and integers
// beyond 64 bits. Jinja syntax errors are *SyntaxError; raise_exception is
// *RaiseError carrying the template's message; other runtime errors
// (jinja2's UndefinedError, TypeError, ...) are *RenderError. Hostile
// templates hit safety limits (steps, output size, nesting) reported as
// ErrLimit, and Parse and Render never panic.
//
// Known differences: printing a generator or function shows no address;
// str.upper/lower use Go's case tables plus the ß and İ special cases;
// the "sameas" test follows CPython identity only for None, booleans,
// small ints and the same dict or namespace.
//
// # Golden data
//
// testdata holds real chat templates (sources in testdata/README.md) and
// golden.json, the output of transformers for every template over a table
// of conversations (and the raise_exception text where the template
// refuses one). TestGolden requires it. To regenerate it, run where
// transformers is installed:
//
//	cd model/chat/testdata && python3 gen.py --out golden.json
//
// gen.py records the transformers and jinja2 versions it used;
// "python3 gen.py --backend jinja" renders with plain jinja2 configured like
// transformers and only serves to check the script itself.
package chat
