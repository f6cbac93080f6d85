package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// parseModel reads the "model" section; only BPE is supported.
func parseModel(raw json.RawMessage) (*bpeModel, error) {
	o, err := parseObj("model", raw)
	if err != nil {
		return nil, err
	}
	t, err := o.str("type", "")
	if err != nil {
		return nil, err
	}
	if t == "" {
		if _, ok := o.m["merges"]; !ok {
			return nil, fmt.Errorf("tokenizer: model has no \"type\" and no merges")
		}
		t = "BPE"
	}
	if t != "BPE" {
		return nil, unsupported("model.type", t, "BPE")
	}
	var dropout float64
	if _, err := o.get("dropout", &dropout); err != nil {
		return nil, err
	}
	if dropout != 0 {
		return nil, unsupported("model.dropout", fmt.Sprint(dropout), "null")
	}
	var c bpeConfig
	for key, dst := range map[string]**string{
		"unk_token": &c.unk, "continuing_subword_prefix": &c.prefix, "end_of_word_suffix": &c.suffix,
	} {
		var s string
		ok, err := o.get(key, &s)
		if err != nil {
			return nil, err
		}
		if ok {
			*dst = &s
		}
	}
	for key, dst := range map[string]*bool{
		"fuse_unk": &c.fuseUnk, "byte_fallback": &c.byteFallback, "ignore_merges": &c.ignoreMerges,
	} {
		if *dst, err = o.boolean(key, false); err != nil {
			return nil, err
		}
	}
	ok, err := o.get("vocab", &c.vocab)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("tokenizer: model.vocab is missing")
	}
	if c.merges, err = parseMerges(o.m["merges"]); err != nil {
		return nil, err
	}
	return newBPE(c)
}

// parseMerges reads merges as ["a b", ...] or [["a", "b"], ...].
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, fmt.Errorf("tokenizer: model.merges is missing")
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("tokenizer: model.merges is neither [\"a b\", ...] nor [[\"a\", \"b\"], ...]: %w", err)
	}
	pairs = make([][2]string, 0, len(lines))
	for _, l := range lines {
		if strings.HasPrefix(l, "#version") {
			continue
		}
		a, b, ok := strings.Cut(l, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("tokenizer: model.merges[%d] %q is not two tokens separated by one space", len(pairs), l)
		}
		pairs = append(pairs, [2]string{a, b})
	}
	return pairs, nil
}
