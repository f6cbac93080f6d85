package tokenizer

import (
	"encoding/json"
	"fmt"
)

// preTokenizerTypes are the "type" values this package reads.
var preTokenizerTypes = []string{"Sequence", "Split", "ByteLevel", "Metaspace", "Digits"}

// parsePreTokenizer appends the steps of a pre-tokenizer, flattening
// Sequences.
func parsePreTokenizer(steps []preTokenizer, path string, raw json.RawMessage) ([]preTokenizer, error) {
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
		list, err := o.list("pretokenizers")
		if err != nil {
			return nil, err
		}
		for i, r := range list {
			if steps, err = parsePreTokenizer(steps, fmt.Sprintf("%s.pretokenizers[%d]", path, i), r); err != nil {
				return nil, err
			}
		}
		return steps, nil
	case "Split":
		pat, isRegex, err := o.pattern("pattern")
		if err != nil {
			return nil, err
		}
		bname, err := o.requiredStr("behavior")
		if err != nil {
			return nil, err
		}
		b, ok := behaviorNames[bname]
		if !ok {
			return nil, unsupported(o.field("behavior"), bname, "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")
		}
		invert, err := o.boolean("invert", false)
		if err != nil {
			return nil, err
		}
		m := newStringMatcher(pat)
		if isRegex {
			if m, err = newRegexMatcher(o.field("pattern"), pat); err != nil {
				return nil, err
			}
		}
		return append(steps, &splitPre{m: m, behavior: b, invert: invert, isolated: b == isolated && !invert}), nil
	case "ByteLevel":
		aps, err := o.boolean("add_prefix_space", true)
		if err != nil {
			return nil, err
		}
		re, err := o.boolean("use_regex", true)
		if err != nil {
			return nil, err
		}
		return append(steps, &byteLevelPre{addPrefixSpace: aps, useRegex: re}), nil
	case "Metaspace":
		m, err := parseMetaspace(o)
		if err != nil {
			return nil, err
		}
		return append(steps, m), nil
	case "Digits":
		ind, err := o.boolean("individual_digits", false)
		return append(steps, &digitsPre{ind}), err
	}
	return nil, unsupported(path+".type", t, preTokenizerTypes...)
}

// parseMetaspace reads the fields Metaspace pre-tokenizers and decoders share.
func parseMetaspace(o *jobj) (*metaspacePre, error) {
	r, err := o.char("replacement", '\u2581')
	if err != nil {
		return nil, err
	}
	sname, err := o.str("prepend_scheme", "always")
	if err != nil {
		return nil, err
	}
	schemes := map[string]prependScheme{"always": prependAlways, "first": prependFirst, "never": prependNever}
	scheme, ok := schemes[sname]
	if !ok {
		return nil, unsupported(o.field("prepend_scheme"), sname, "always", "first", "never")
	}
	var aps bool
	if has, err := o.get("add_prefix_space", &aps); err != nil {
		return nil, err
	} else if has && !aps {
		if scheme != prependNever {
			return nil, fmt.Errorf("tokenizer: %s: add_prefix_space false does not match prepend_scheme %q", o.path, sname)
		}
	}
	split, err := o.boolean("split", true)
	return &metaspacePre{repl: string(r), replR: r, scheme: scheme, splitOn: split}, err
}
