package tokenizer

import (
	"encoding/json"
	"fmt"

	"golang.org/x/text/unicode/norm"
)

// normalizerTypes are the "type" values this package reads.
var normalizerTypes = []string{"Sequence", "Prepend", "Replace", "NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip"}

// replacePattern builds the matcher of a Replace normalizer or decoder.
func replacePattern(o *jobj) (replaceNormalizer, error) {
	pat, isRegex, err := o.pattern("pattern")
	if err != nil {
		return replaceNormalizer{}, err
	}
	content, err := o.str("content", "")
	if err != nil {
		return replaceNormalizer{}, err
	}
	if isRegex {
		m, err := newRegexMatcher(o.field("pattern"), pat)
		return replaceNormalizer{m: m, content: content}, err
	}
	return replaceNormalizer{m: newStringMatcher(pat), lit: pat, content: content}, nil
}

// parseNormalizer reads a normalizer; path locates it for errors.
func parseNormalizer(path string, raw json.RawMessage) (normalizer, error) {
	o, err := parseObj(path, raw)
	if err != nil {
		return nil, err
	}
	t, err := o.typ()
	if err != nil {
		return nil, err
	}
	switch t {
	case "Sequence":
		list, err := o.list("normalizers")
		if err != nil {
			return nil, err
		}
		var seq seqNormalizer
		for i, r := range list {
			n, err := parseNormalizer(fmt.Sprintf("%s.normalizers[%d]", path, i), r)
			if err != nil {
				return nil, err
			}
			seq = append(seq, n)
		}
		return seq, nil
	case "Prepend":
		s, err := o.requiredStr("prepend")
		return prependNormalizer(s), err
	case "Replace":
		return replacePattern(o)
	case "NFC":
		return unicodeNormalizer{norm.NFC}, nil
	case "NFD":
		return unicodeNormalizer{norm.NFD}, nil
	case "NFKC":
		return unicodeNormalizer{norm.NFKC}, nil
	case "NFKD":
		return unicodeNormalizer{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "Strip":
		l, err := o.boolean("strip_left", true)
		if err != nil {
			return nil, err
		}
		r, err := o.boolean("strip_right", true)
		return stripNormalizer{l, r}, err
	}
	return nil, unsupported(path+".type", t, normalizerTypes...)
}
