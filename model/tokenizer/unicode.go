package tokenizer

import "unicode"

// Character classes as the regex engines of tokenizers see them: Oniguruma
// (the Split and ByteLevel regexes) and Rust's regex crate (added tokens).
// \s is Unicode White_Space, \p{L} is the L category, \p{N} is N.

const (
	clsOther = iota
	clsL
	clsN
	clsWS
)

var asciiClass = func() (t [128]uint8) {
	for c := 0; c < 128; c++ {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			t[c] = clsL
		case c >= '0' && c <= '9':
			t[c] = clsN
		case c == ' ' || (c >= '\t' && c <= '\r'):
			t[c] = clsWS
		}
	}
	return t
}()

// isWS reports whether r has the Unicode White_Space property.
func isWS(r rune) bool {
	if r < 0x80 {
		return r == ' ' || (r >= '\t' && r <= '\r')
	}
	switch r {
	case 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// classOf returns the class of r: letter, number, white space or other.
func classOf(r rune) uint8 {
	if r < 0x80 {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return clsL
	case unicode.IsNumber(r):
		return clsN
	case isWS(r):
		return clsWS
	}
	return clsOther
}

// isWordChar reports whether r matches \w of Rust's regex crate:
// Alphabetic, Mark, Decimal_Number, Connector_Punctuation, Join_Control.
func isWordChar(r rune) bool {
	if r < 0x80 {
		return r == '_' || asciiClass[r] == clsL || asciiClass[r] == clsN
	}
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) ||
		unicode.Is(unicode.Other_Alphabetic, r) || unicode.IsMark(r) ||
		unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) ||
		r == 0x200C || r == 0x200D
}
