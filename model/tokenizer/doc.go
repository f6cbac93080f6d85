// Package tokenizer reads Hugging Face tokenizer.json files and encodes and
// decodes text exactly as the Hugging Face `tokenizers` library (0.23) does,
// byte for byte, in pure Go.
//
//	tok, err := tokenizer.Load("tokenizer.json")
//	ids, err := tok.Encode("Hello world", true) // true: add the template's BOS etc.
//	text, err := tok.Decode(ids, true)          // true: drop special tokens
//
// Token and TokenID map between ids and token strings, VocabSize counts the
// model's and the added tokens, AddedTokens lists the added tokens with the
// ids the library gives them and IsSpecial tells the special ones. A
// Tokenizer is safe for concurrent use.
//
// # Supported
//
// The pipeline is the library's: added tokens are cut out of the text
// (leftmost-longest; single_word, lstrip, rstrip and normalized honoured,
// ids assigned as AddedVocabulary does), the rest is normalized, the
// normalized added tokens are cut out, then pre-tokenization, the model and
// the post-processor.
//
//   - model: BPE with vocab, merges as "a b" strings or [a, b] pairs (rank is
//     the position; a later duplicate wins), unk_token, fuse_unk,
//     byte_fallback, ignore_merges, continuing_subword_prefix,
//     end_of_word_suffix. Merging takes the lowest rank first, leftmost
//     first on ties, like the library's word merging.
//   - normalizer: Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD
//     (golang.org/x/text), Lowercase, Strip.
//   - pre_tokenizer: Sequence, Split (String or Regex pattern, every
//     behavior, invert), ByteLevel (add_prefix_space, use_regex),
//     Metaspace (replacement, prepend_scheme always/first/never, split),
//     Digits.
//   - post_processor: TemplateProcessing (single template), ByteLevel,
//     Sequence.
//   - decoder: ByteLevel, Metaspace, Sequence, Replace, ByteFallback, Fuse,
//     Strip.
//
// The regexes of GPT-2, Llama 3 and Qwen2 (the exact strings, see scan.go)
// are matched by hand-written scanners that follow Oniguruma's backtracking:
// `\s+(?!\S)` gives a white-space run less its last character when a
// non-space follows, `\s*[\r\n]+` ends after the run's last line break, \s is
// Unicode White_Space, \p{L} and \p{N} the Unicode categories, and the
// Llama 3 contractions fold case (ſ counts as s). Other regexes go to Go's
// regexp after \s, \S, \d, \D, \w and \W are rewritten to Oniguruma's Unicode
// meaning; a pattern Go cannot compile (look-around, possessive or atomic
// groups, back references) is refused at Parse time with its text in the
// error. Such fallback patterns are not covered by the golden tests.
//
// # Refused
//
// Parse refuses, naming the field and the value: other model types
// (WordPiece, Unigram, WordLevel), a BPE dropout other than null or 0, other
// normalizers (BertNormalizer, Precompiled, NMT, StripAccents, ...), other
// pre-tokenizers (BertPreTokenizer, Whitespace, Punctuation, UnicodeScripts,
// ...), RobertaProcessing and BertProcessing, other decoders (WordPiece, BPE,
// CTC), non-null truncation or padding, a version other than "1.0", merges
// whose tokens are not in the vocab and templates naming missing special
// tokens.
//
// # Differences
//
// Encode returns ErrInvalidUTF8 for text that is not UTF-8 (the library takes
// only Unicode strings). Decode skips ids that name no token, as the library
// does, and fails on negative ids. Where the library panics (a Strip decoder
// cutting more than a token holds) this package returns what is left. When
// two vocab entries share an id, Token and Decode use the smaller string.
// The Unicode tables are Go's (15.0).
//
// # Golden data
//
// testdata/gen.py builds, deterministically and offline, a 1.26 MB corpus of
// 2299 documents (slices of the Python standard library's sources and
// docstrings, sentences in a dozen scripts from testdata/sentences.py, emoji
// with ZWJ sequences, skin tones, flags and variation selectors, white-space
// runs, digits, contractions in both cases and the special tokens' literal
// strings), trains BPE models on it with the library and writes six
// tokenizer.json files shaped like the real families: llama3 (Split with the
// Llama 3 regex, ByteLevel, ignore_merges, TemplateProcessing adding
// <|begin_of_text|>), qwen2 (NFC, the Qwen2 regex, non-special added tokens),
// gpt2 (ByteLevel with its regex, legacy "a b" merges, empty prefix and
// suffix), flags (GPT-2's model with NFKC, Lowercase, Digits, add_prefix_space
// and added tokens using lstrip, rstrip, single_word and normalized), llama2
// (Prepend and Replace normalizers, byte_fallback with the 256 <0xNN> tokens,
// fuse_unk, the Replace/ByteFallback/Fuse/Strip decoder) and mistral
// (Metaspace with prepend_scheme first and split false, [INST] tokens,
// a Metaspace/ByteFallback/Fuse decoder). For every document it records the
// ids of encode without special tokens (and, for every 7th, with them) and
// both decodes; it also records decodes of random id sequences (invalid UTF-8,
// unknown ids) and the splits of the three known regexes on 3000 random
// strings. TestGolden and TestPretokGolden compare all of it and fail when
// the data is missing. testdata/reference_speed.json has the library's
// single-thread speed on the machine that made the data.
//
// The data in testdata was made with tokenizers 0.23.2 under Python 3.12.3.
// To regenerate it (needs the tokenizers package; no network):
//
//	cd model/tokenizer/testdata && PYTHONUNBUFFERED=1 python3 gen.py --out /tmp/tokgen &&
//	  tar -xzf /tmp/tokgen/testdata.tar.gz -C . && cp /tmp/tokgen/gen.log .
//
// Speed: go test ./model/tokenizer/ -run '^$' -bench . -benchtime 5x
// (MB/s of corpus text, as in reference_speed.json).
package tokenizer
