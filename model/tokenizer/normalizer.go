package tokenizer

import (
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// A normalizer rewrites the text between added tokens before
// pre-tokenization.
type normalizer interface {
	normalize(s string) string
}

type seqNormalizer []normalizer

func (q seqNormalizer) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// prependNormalizer puts a string in front of non-empty text.
type prependNormalizer string

func (p prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return string(p) + s
}

// replaceNormalizer replaces every match of a pattern by content.
type replaceNormalizer struct {
	m       matcher
	lit     string // the literal pattern, when it is one
	content string
}

func (r replaceNormalizer) normalize(s string) string {
	if r.lit != "" {
		return strings.ReplaceAll(s, r.lit, r.content)
	}
	return replaceMatches(r.m, s, r.content)
}

func replaceMatches(m matcher, s, content string) string {
	var b strings.Builder
	last := 0
	m.find(s, func(start, end int) {
		b.WriteString(s[last:start])
		b.WriteString(content)
		last = end
	})
	if last == 0 && b.Len() == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// unicodeNormalizer is NFC, NFD, NFKC or NFKD.
type unicodeNormalizer struct{ form norm.Form }

func (u unicodeNormalizer) normalize(s string) string { return u.form.String(s) }

// lowercaseNormalizer lowercases one character at a time, like Rust's
// char::to_lowercase (no context-dependent final sigma).
type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string) string {
	// U+0130 is the one character whose full lowercase mapping has two.
	if strings.ContainsRune(s, 0x130) {
		s = strings.ReplaceAll(s, "\u0130", "i\u0307")
	}
	return strings.Map(unicode.ToLower, s)
}

// stripNormalizer removes leading and/or trailing white space.
type stripNormalizer struct{ left, right bool }

func (st stripNormalizer) normalize(s string) string {
	if st.left {
		s = strings.TrimLeftFunc(s, isWS)
	}
	if st.right {
		s = strings.TrimRightFunc(s, isWS)
	}
	return s
}
