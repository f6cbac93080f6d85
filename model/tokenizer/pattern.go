package tokenizer

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// A matcher finds the non-overlapping matches of a pattern, left to right.
type matcher interface {
	find(s string, emit func(start, end int))
}

// scanMatcher is a hand-written scanner for a known regex.
type scanMatcher func(s string, emit func(start, end int))

func (f scanMatcher) find(s string, emit func(start, end int)) { f(s, emit) }

// literalMatcher matches a non-empty literal string.
type literalMatcher string

func (l literalMatcher) find(s string, emit func(start, end int)) {
	lit := string(l)
	for off := 0; off <= len(s); {
		k := strings.Index(s[off:], lit)
		if k < 0 {
			return
		}
		emit(off+k, off+k+len(lit))
		off += k + len(lit)
	}
}

// runeMatcher matches every single occurrence of a character class, one
// character per match (tokenizers' Pattern for Fn(char) -> bool).
type runeMatcher func(r rune) bool

func (f runeMatcher) find(s string, emit func(start, end int)) {
	for i, r := range s {
		if f(r) {
			emit(i, i+utf8.RuneLen(r))
		}
	}
}

// regexMatcher falls back to Go's regexp for patterns with no hand-written
// scanner.
type regexMatcher struct{ re *regexp.Regexp }

func (m regexMatcher) find(s string, emit func(start, end int)) {
	for _, loc := range m.re.FindAllStringIndex(s, -1) {
		emit(loc[0], loc[1])
	}
}

// newRegexMatcher returns the matcher of an Oniguruma pattern from
// tokenizer.json: a hand-written scanner when the pattern is a known one,
// else Go's regexp after \s, \S, \d, \D, \w and \W are rewritten to the
// Unicode classes Oniguruma gives them. Patterns Go cannot compile (look
// around, possessive or atomic groups, back references) are refused.
func newRegexMatcher(field, pattern string) (matcher, error) {
	if scan := knownScanner(pattern); scan != nil {
		return scanMatcher(scan), nil
	}
	goPat, err := onigToGo(pattern)
	if err == nil {
		var re *regexp.Regexp
		if re, err = regexp.Compile(goPat); err == nil {
			return regexMatcher{re}, nil
		}
	}
	return nil, fmt.Errorf("tokenizer: %s regex %q is not supported: it is none of the known GPT-2, Llama 3 and Qwen2 patterns and Go's regexp cannot take it: %v",
		field, pattern, err)
}

// newStringMatcher matches a literal pattern ({"String": ...}).
func newStringMatcher(lit string) matcher {
	if lit == "" {
		return regexMatcher{regexp.MustCompile(``)}
	}
	return literalMatcher(lit)
}

const (
	wsClassBody = `\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}`
	wordBody    = `\p{L}\p{M}\p{N}\p{Pc}`
)

// onigToGo rewrites the Perl classes whose meaning differs between
// Oniguruma (Unicode) and Go (ASCII).
func onigToGo(p string) (string, error) {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			e := p[i+1]
			i++
			var out string
			switch e {
			case 's':
				out = "[" + wsClassBody + "]"
				if inClass {
					out = wsClassBody
				}
			case 'S':
				if inClass {
					return "", fmt.Errorf(`\S inside a character class`)
				}
				out = "[^" + wsClassBody + "]"
			case 'w':
				out = "[" + wordBody + "]"
				if inClass {
					out = wordBody
				}
			case 'W':
				if inClass {
					return "", fmt.Errorf(`\W inside a character class`)
				}
				out = "[^" + wordBody + "]"
			case 'd':
				out = `\p{Nd}`
			case 'D':
				out = `\P{Nd}`
			default:
				out = p[i-1 : i+1]
			}
			b.WriteString(out)
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte(c)
			if i+1 < len(p) && p[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(p) && p[i+1] == ']' {
				b.WriteByte(']')
				i++
			}
		case c == '[' && inClass && i+1 < len(p) && p[i+1] == ':':
			end := strings.Index(p[i:], ":]")
			if end < 0 {
				return "", fmt.Errorf("unterminated POSIX class")
			}
			b.WriteString(p[i : i+end+2])
			i += end + 1
		case c == ']' && inClass:
			inClass = false
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// span is a piece of a string and whether the pattern matched it.
type span struct {
	start, end int
	match      bool
}

// findSpans tiles s into matches and the text between them, as tokenizers'
// Pattern::find_matches does.
func findSpans(m matcher, s string, dst []span) []span {
	if s == "" {
		return append(dst, span{0, 0, false})
	}
	prev := 0
	m.find(s, func(start, end int) {
		if prev != start {
			dst = append(dst, span{prev, start, false})
		}
		dst = append(dst, span{start, end, true})
		prev = end
	})
	if prev != len(s) {
		dst = append(dst, span{prev, len(s), false})
	}
	return dst
}
