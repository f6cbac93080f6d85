package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// lossyUTF8 converts b to a string the way Rust's String::from_utf8_lossy
// does: every maximal prefix of a valid sequence that is cut short, and every
// byte that cannot start one, becomes one U+FFFD. (Go's own conversions give
// one U+FFFD per bad byte instead.)
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			sb.WriteByte(c)
			i++
			continue
		}
		if n := validSeqLen(b[i:]); n > 0 {
			sb.Write(b[i : i+n])
			i += n
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += invalidSeqLen(b[i:])
	}
	return sb.String()
}

// secondByteRange gives the allowed range of the byte after lead byte c.
func secondByteRange(c byte) (lo, hi byte, width int) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 0x80, 0xBF, 2
	case c == 0xE0:
		return 0xA0, 0xBF, 3
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		return 0x80, 0xBF, 3
	case c == 0xED:
		return 0x80, 0x9F, 3
	case c == 0xF0:
		return 0x90, 0xBF, 4
	case c >= 0xF1 && c <= 0xF3:
		return 0x80, 0xBF, 4
	case c == 0xF4:
		return 0x80, 0x8F, 4
	}
	return 0, 0, 0
}

// validSeqLen returns the length of the valid sequence at the start of b, or 0.
func validSeqLen(b []byte) int {
	lo, hi, w := secondByteRange(b[0])
	if w == 0 || len(b) < w || b[1] < lo || b[1] > hi {
		return 0
	}
	for k := 2; k < w; k++ {
		if b[k]&0xC0 != 0x80 {
			return 0
		}
	}
	return w
}

// invalidSeqLen returns how many bytes one U+FFFD replaces at the start of b,
// which does not begin a valid sequence.
func invalidSeqLen(b []byte) int {
	lo, hi, w := secondByteRange(b[0])
	if w == 0 || len(b) < 2 || b[1] < lo || b[1] > hi {
		return 1
	}
	n := 2
	for n < w && n < len(b) && b[n]&0xC0 == 0x80 {
		n++
	}
	return n
}
