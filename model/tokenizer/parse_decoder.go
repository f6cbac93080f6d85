package tokenizer

import (
	"encoding/json"
	"fmt"
)

// decoderTypes are the "type" values this package reads.
var decoderTypes = []string{"ByteLevel", "Metaspace", "Sequence", "Replace", "ByteFallback", "Fuse", "Strip"}

// parseDecoder reads a decoder; path locates it in the file for errors.
func parseDecoder(path string, raw json.RawMessage) (decoder, error) {
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
		list, err := o.list("decoders")
		if err != nil {
			return nil, err
		}
		var seq seqDecoder
		for i, r := range list {
			d, err := parseDecoder(fmt.Sprintf("%s.decoders[%d]", path, i), r)
			if err != nil {
				return nil, err
			}
			seq = append(seq, d)
		}
		return seq, nil
	case "ByteLevel":
		return byteLevelDecoder{}, nil
	case "Metaspace":
		m, err := parseMetaspace(o)
		if err != nil {
			return nil, err
		}
		return metaspaceDecoder{m.replR, m.scheme}, nil
	case "Replace":
		r, err := replacePattern(o)
		return replaceDecoder{r}, err
	case "ByteFallback":
		return byteFallbackDecoder{}, nil
	case "Fuse":
		return fuseDecoder{}, nil
	case "Strip":
		c, err := o.char("content", ' ')
		if err != nil {
			return nil, err
		}
		start, err := o.integer("start", 0)
		if err != nil {
			return nil, err
		}
		stop, err := o.integer("stop", 0)
		if err == nil && (start < 0 || stop < 0) {
			err = fmt.Errorf("tokenizer: %s: negative start or stop", path)
		}
		return stripDecoder{c, start, stop}, err
	}
	return nil, unsupported(path+".type", t, decoderTypes...)
}
