package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// A decoder turns token strings back into text, one step of a chain.
type decoder interface {
	decodeChain(tokens []string) []string
}

type seqDecoder []decoder

func (q seqDecoder) decodeChain(tokens []string) []string {
	for _, d := range q {
		tokens = d.decodeChain(tokens)
	}
	return tokens
}

// byteLevelDecoder maps byte-level characters back to bytes and reads them
// as UTF-8 (lossily, the way Rust does).
type byteLevelDecoder struct{}

func (byteLevelDecoder) decodeChain(tokens []string) []string {
	var buf []byte
	for _, t := range tokens {
		buf = byteLevelDecodeToken(buf, t)
	}
	return []string{lossyUTF8(buf)}
}

// metaspaceDecoder turns the replacement character back into spaces; in the
// first token it is dropped unless prepend_scheme is "never".
type metaspaceDecoder struct {
	repl   rune
	scheme prependScheme
}

func (m metaspaceDecoder) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		if !strings.ContainsRune(t, m.repl) {
			out[i] = t
			continue
		}
		drop := i == 0 && m.scheme != prependNever
		out[i] = strings.Map(func(r rune) rune {
			if r != m.repl {
				return r
			}
			if drop {
				return -1
			}
			return ' '
		}, t)
	}
	return out
}

// replaceDecoder replaces a pattern in every token.
type replaceDecoder struct{ r replaceNormalizer }

func (d replaceDecoder) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		out[i] = d.r.normalize(t)
	}
	return out
}

// byteFallbackDecoder turns runs of <0xNN> tokens into the text of their
// bytes, or one U+FFFD per byte when they are not valid UTF-8.
type byteFallbackDecoder struct{}

// fallbackByte parses <0xNN> the way tokenizers does (u8::from_str_radix).
func fallbackByte(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	h := t[3:5]
	if h[0] == '+' {
		h = h[1:]
	}
	var v int
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c >= '0' && c <= '9':
			v = v*16 + int(c-'0')
		case c >= 'a' && c <= 'f':
			v = v*16 + int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v*16 + int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return byte(v), true
}

func (byteFallbackDecoder) decodeChain(tokens []string) []string {
	out := make([]string, 0, len(tokens))
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, t := range tokens {
		if b, ok := fallbackByte(t); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// fuseDecoder joins all tokens into one.
type fuseDecoder struct{}

func (fuseDecoder) decodeChain(tokens []string) []string {
	return []string{strings.Join(tokens, "")}
}

// stripDecoder removes up to start leading and stop trailing copies of a
// character from every token.
type stripDecoder struct {
	content     rune
	start, stop int
}

func (d stripDecoder) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		chars := []rune(t)
		lo := 0
		for k := 0; k < d.start && k < len(chars) && chars[k] == d.content; k++ {
			lo = k + 1
		}
		hi := len(chars)
		for k := 0; k < d.stop && k < len(chars); k++ {
			idx := len(chars) - k - 1
			if chars[idx] != d.content {
				break
			}
			hi = idx
		}
		if hi < lo {
			hi = lo
		}
		out[i] = string(chars[lo:hi])
	}
	return out
}
