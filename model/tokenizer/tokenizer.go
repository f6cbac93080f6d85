package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

// Tokenizer encodes text to token ids and decodes them back, as the Hugging
// Face tokenizer described by a tokenizer.json file does. It is safe for
// concurrent use.
type Tokenizer struct {
	model    *bpeModel
	added    *addedVocab
	norm     normalizer
	pre      []preTokenizer
	rawBytes bool // the last pre-tokenizer is ByteLevel and the model maps bytes itself
	post     postProcessor
	dec      decoder
	nvocab   int
	scratch  sync.Pool
}

type scratch struct {
	a, b []piece
	sp   []span
	ids  []int32
}

// Load reads a tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return t, nil
}

type rawFile struct {
	Version       *string           `json:"version"`
	Truncation    json.RawMessage   `json:"truncation"`
	Padding       json.RawMessage   `json:"padding"`
	AddedTokens   []json.RawMessage `json:"added_tokens"`
	Normalizer    json.RawMessage   `json:"normalizer"`
	PreTokenizer  json.RawMessage   `json:"pre_tokenizer"`
	PostProcessor json.RawMessage   `json:"post_processor"`
	Decoder       json.RawMessage   `json:"decoder"`
	Model         json.RawMessage   `json:"model"`
}

// Parse reads the contents of a tokenizer.json file. Anything it cannot
// reproduce exactly is refused with an error naming the field.
func Parse(data []byte) (*Tokenizer, error) {
	var f rawFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: bad tokenizer.json: %w", err)
	}
	if f.Version != nil && *f.Version != "1.0" {
		return nil, unsupported("version", *f.Version, "1.0")
	}
	if !isNull(f.Truncation) {
		return nil, fmt.Errorf("tokenizer: truncation is set; only null is supported")
	}
	if !isNull(f.Padding) {
		return nil, fmt.Errorf("tokenizer: padding is set; only null is supported")
	}
	if isNull(f.Model) {
		return nil, fmt.Errorf("tokenizer: model is missing")
	}
	t := &Tokenizer{}
	var err error
	if t.model, err = parseModel(f.Model); err != nil {
		return nil, err
	}
	if !isNull(f.Normalizer) {
		if t.norm, err = parseNormalizer("normalizer", f.Normalizer); err != nil {
			return nil, err
		}
	}
	if !isNull(f.PreTokenizer) {
		if t.pre, err = parsePreTokenizer(nil, "pre_tokenizer", f.PreTokenizer); err != nil {
			return nil, err
		}
	}
	if !isNull(f.PostProcessor) {
		if t.post, err = parseProcessor("post_processor", f.PostProcessor); err != nil {
			return nil, err
		}
	}
	if !isNull(f.Decoder) {
		if t.dec, err = parseDecoder("decoder", f.Decoder); err != nil {
			return nil, err
		}
	}
	tokens, err := parseAddedTokens(f.AddedTokens)
	if err != nil {
		return nil, err
	}
	if t.added, err = newAddedVocab(tokens, t.model, t.norm); err != nil {
		return nil, err
	}
	// A final ByteLevel step leaves the byte mapping to the model.
	if n := len(t.pre); n > 0 {
		if bl, ok := t.pre[n-1].(*byteLevelPre); ok && t.model.canDefer() {
			bl.deferred = true
			t.rawBytes = true
			t.model.prepareByteLevel()
		}
	}
	t.nvocab = t.model.size()
	for c := range t.added.byContent {
		if _, ok := t.model.vocab[c]; !ok {
			t.nvocab++
		}
	}
	t.scratch.New = func() any { return new(scratch) }
	return t, nil
}

func parseAddedTokens(list []json.RawMessage) ([]AddedToken, error) {
	out := make([]AddedToken, 0, len(list))
	for i, raw := range list {
		path := fmt.Sprintf("added_tokens[%d]", i)
		o, err := parseObj(path, raw)
		if err != nil {
			return nil, err
		}
		var t AddedToken
		if t.Content, err = o.requiredStr("content"); err != nil {
			return nil, err
		}
		if t.ID, err = o.integer("id", 0); err != nil {
			return nil, err
		}
		flags := []struct {
			key string
			dst *bool
			def bool
		}{
			{"special", &t.Special, false}, {"single_word", &t.SingleWord, false},
			{"lstrip", &t.LStrip, false}, {"rstrip", &t.RStrip, false}, {"normalized", &t.Normalized, true},
		}
		for _, fl := range flags {
			if *fl.dst, err = o.boolean(fl.key, fl.def); err != nil {
				return nil, err
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// Encode returns the token ids of text. With addSpecial the post-processor's
// template adds its special tokens (for example the BOS token of Llama).
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int, error) {
	s := t.scratch.Get().(*scratch)
	defer t.scratch.Put(s)
	ids, err := t.encode(s, text, addSpecial)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out, nil
}

func (t *Tokenizer) encode(s *scratch, text string, addSpecial bool) ([]int32, error) {
	if !utf8.ValidString(text) {
		return nil, ErrInvalidUTF8
	}
	// 1. Added tokens matched in the original text.
	cur := t.added.split(s.a[:0], piece{text, -1, true}, t.added.raw)
	// 2. Normalization of the rest, then the tokens matched after it.
	next := s.b[:0]
	for _, p := range cur {
		if p.id >= 0 {
			next = append(next, p)
			continue
		}
		if t.norm != nil {
			p.text = t.norm.normalize(p.text)
		}
		next = t.added.split(next, p, t.added.norm)
	}
	cur, next = next, cur
	// 3. Pre-tokenization.
	for _, step := range t.pre {
		next = next[:0]
		for _, p := range cur {
			if p.id >= 0 {
				next = append(next, p)
				continue
			}
			next, s.sp = step.split(next, p, s.sp)
		}
		cur, next = next, cur
	}
	s.a, s.b = cur[:0], next[:0]
	// 4. The model.
	ids := s.ids[:0]
	var err error
	for _, p := range cur {
		if p.id >= 0 {
			ids = append(ids, p.id)
			continue
		}
		if ids, err = t.model.tokenize(ids, p.text, t.rawBytes); err != nil {
			return nil, err
		}
	}
	clear(cur) // drop references to the text
	s.ids = ids[:0]
	// 5. Post-processing.
	if t.post != nil {
		ids = t.post.process(ids, addSpecial)
	}
	return ids, nil
}

// Decode returns the text of ids. Ids that name no token are skipped, as in
// tokenizers; with skipSpecial the special added tokens are skipped too.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) (string, error) {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		if id < 0 {
			return "", fmt.Errorf("tokenizer: Decode: negative id %d", id)
		}
		if id > 1<<31-1 {
			continue
		}
		s, ok := t.token(int32(id))
		if !ok || (skipSpecial && t.added.special[s]) {
			continue
		}
		tokens = append(tokens, s)
	}
	if t.dec == nil {
		return strings.Join(tokens, " "), nil
	}
	return strings.Join(t.dec.decodeChain(tokens), ""), nil
}

func (t *Tokenizer) token(id int32) (string, bool) {
	if s, ok := t.added.tokenString(id); ok {
		return s, true
	}
	return t.model.token(id)
}

// TokenID returns the id of a token string (added tokens first, then the
// model's vocab).
func (t *Tokenizer) TokenID(token string) (int, bool) {
	if id, ok := t.added.byContent[token]; ok {
		return int(id), true
	}
	id, ok := t.model.vocab[token]
	return int(id), ok
}

// Token returns the string of a token id, as Decode sees it.
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id > 1<<31-1 {
		return "", false
	}
	return t.token(int32(id))
}

// VocabSize is the number of distinct tokens, those of the model and the
// added ones (tokenizers' get_vocab_size(with_added_tokens=True)).
func (t *Tokenizer) VocabSize() int { return t.nvocab }

// AddedTokens returns the added tokens, with the ids they were given, in id
// order.
func (t *Tokenizer) AddedTokens() []AddedToken {
	out := make([]AddedToken, 0, len(t.added.byID))
	for _, tok := range t.added.byID {
		out = append(out, tok)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id int) bool {
	if id < 0 || id > 1<<31-1 {
		return false
	}
	tok, ok := t.added.byID[int32(id)]
	return ok && tok.Special
}
