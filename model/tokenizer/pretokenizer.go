package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// piece is a part of the text on its way to the model.
type piece struct {
	text    string
	id      int32 // the id of an added token, or -1 for text still to tokenize
	atStart bool  // the piece begins at offset 0 of the original text
}

// A preTokenizer splits one piece into smaller ones.
type preTokenizer interface {
	// split appends the non-empty pieces of p to dst.
	split(dst []piece, p piece, sp []span) ([]piece, []span)
}

// splitBy appends the pieces of p cut by pattern m under behavior b.
func splitBy(dst []piece, p piece, sp []span, m matcher, b behavior, invert bool) ([]piece, []span) {
	sp = findSpans(m, p.text, sp[:0])
	if invert {
		for i := range sp {
			sp[i].match = !sp[i].match
		}
	}
	for _, s := range b.apply(sp) {
		if !s.match && s.end > s.start {
			dst = append(dst, piece{p.text[s.start:s.end], -1, p.atStart && s.start == 0})
		}
	}
	return dst, sp
}

// splitPre is the Split pre-tokenizer.
type splitPre struct {
	m        matcher
	behavior behavior
	invert   bool
	isolated bool // isolated, not inverted: the fast path
}

func (s *splitPre) split(dst []piece, p piece, sp []span) ([]piece, []span) {
	if s.isolated { // every span is kept: no need to build them
		prev := 0
		s.m.find(p.text, func(start, end int) {
			if prev != start {
				dst = append(dst, piece{p.text[prev:start], -1, p.atStart && prev == 0})
			}
			if end > start {
				dst = append(dst, piece{p.text[start:end], -1, p.atStart && start == 0})
			}
			prev = end
		})
		if prev < len(p.text) {
			dst = append(dst, piece{p.text[prev:], -1, p.atStart && prev == 0})
		}
		return dst, sp
	}
	return splitBy(dst, p, sp, s.m, s.behavior, s.invert)
}

// byteLevelPre is the ByteLevel pre-tokenizer: an optional leading space,
// the GPT-2 regex, then every byte mapped to a printable character. When it
// is the last pre-tokenizer the mapping is left to the model (deferred),
// which then works on raw bytes.
type byteLevelPre struct {
	addPrefixSpace bool
	useRegex       bool
	deferred       bool
}

func (b *byteLevelPre) split(dst []piece, p piece, sp []span) ([]piece, []span) {
	if b.addPrefixSpace && !strings.HasPrefix(p.text, " ") {
		p.text = " " + p.text
	}
	n := len(dst)
	if b.useRegex {
		scanGPT2(p.text, func(start, end int) {
			dst = append(dst, piece{p.text[start:end], -1, p.atStart && start == 0})
		})
	} else if p.text != "" {
		dst = append(dst, p)
	}
	if !b.deferred {
		for i := n; i < len(dst); i++ {
			dst[i].text = byteLevelEncode(dst[i].text)
		}
	}
	return dst, sp
}

// prependScheme is Metaspace's prepend_scheme.
type prependScheme uint8

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// metaspacePre is the Metaspace pre-tokenizer: spaces become the
// replacement character, which is put in front of the piece (always, or
// only for the piece at the start of the text) and optionally split on.
type metaspacePre struct {
	repl    string
	replR   rune
	scheme  prependScheme
	splitOn bool
}

func (m *metaspacePre) split(dst []piece, p piece, sp []span) ([]piece, []span) {
	text := strings.ReplaceAll(p.text, " ", m.repl)
	if !strings.HasPrefix(text, m.repl) {
		if m.scheme == prependAlways || (m.scheme == prependFirst && p.atStart) {
			text = m.repl + text
		}
	}
	p.text = text
	if !m.splitOn {
		if text != "" {
			dst = append(dst, p)
		}
		return dst, sp
	}
	r := m.replR
	return splitBy(dst, p, sp, runeMatcher(func(c rune) bool { return c == r }), mergedWithNext, false)
}

// digitsPre is the Digits pre-tokenizer.
type digitsPre struct{ individual bool }

func (d *digitsPre) split(dst []piece, p piece, sp []span) ([]piece, []span) {
	b := contiguous
	if d.individual {
		b = isolated
	}
	return splitBy(dst, p, sp, runeMatcher(unicode.IsNumber), b, false)
}

// byteLevelEncode maps every byte of s to its GPT-2 printable character.
func byteLevelEncode(s string) string {
	buf := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		buf = utf8.AppendRune(buf, byteToRune[s[i]])
	}
	return string(buf)
}
