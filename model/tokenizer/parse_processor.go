package tokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// processorTypes are the "type" values this package reads.
var processorTypes = []string{"TemplateProcessing", "ByteLevel", "Sequence"}

// parseProcessor reads a post-processor; path locates it for errors.
func parseProcessor(path string, raw json.RawMessage) (postProcessor, error) {
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
		list, err := o.list("processors")
		if err != nil {
			return nil, err
		}
		var seq seqProcessor
		for i, r := range list {
			p, err := parseProcessor(fmt.Sprintf("%s.processors[%d]", path, i), r)
			if err != nil {
				return nil, err
			}
			seq = append(seq, p)
		}
		return seq, nil
	case "ByteLevel":
		return byteLevelProcessor{}, nil
	case "TemplateProcessing":
		return parseTemplate(o)
	}
	return nil, unsupported(path+".type", t, processorTypes...)
}

// rawPiece is one item of a template as written in tokenizer.json.
type rawPiece struct {
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
}

// parseTemplate reads TemplateProcessing: its single template is used, the
// pair template is only checked, and every special token must be defined.
func parseTemplate(o *jobj) (*templateProcessor, error) {
	var specials map[string]struct {
		ID  string  `json:"id"`
		IDs []int64 `json:"ids"`
	}
	if _, err := o.get("special_tokens", &specials); err != nil {
		return nil, err
	}
	var missing []string
	read := func(key string, allowB bool) ([]templatePiece, error) {
		var pieces []rawPiece
		if _, err := o.get(key, &pieces); err != nil {
			return nil, err
		}
		var out []templatePiece
		for i, p := range pieces {
			switch {
			case p.Sequence != nil:
				if p.Sequence.ID != "A" && !(allowB && p.Sequence.ID == "B") {
					return nil, unsupported(fmt.Sprintf("%s[%d].Sequence.id", o.field(key), i), p.Sequence.ID, "A")
				}
				out = append(out, templatePiece{isSeq: true})
			case p.SpecialToken != nil:
				st, ok := specials[p.SpecialToken.ID]
				if !ok {
					missing = append(missing, p.SpecialToken.ID)
					continue
				}
				ids := make([]int32, len(st.IDs))
				for k, id := range st.IDs {
					if id < 0 || id > 1<<31-1 {
						return nil, fmt.Errorf("tokenizer: %s: id %d of %q is out of range", o.field("special_tokens"), id, st.ID)
					}
					ids[k] = int32(id)
				}
				out = append(out, templatePiece{special: ids})
			default:
				return nil, fmt.Errorf("tokenizer: %s[%d] is neither a Sequence nor a SpecialToken", o.field(key), i)
			}
		}
		return out, nil
	}
	single, err := read("single", false)
	if err != nil {
		return nil, err
	}
	if _, err := read("pair", true); err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("tokenizer: %s: special_tokens lacks %s", o.path, strings.Join(missing, ", "))
	}
	return &templateProcessor{single: single}, nil
}
