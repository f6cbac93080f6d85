package tokenizer

import "unicode/utf8"

// Hand-written matchers for the pre-tokenization regexes of GPT-2, Llama 3
// and Qwen2. Go's regexp has no look-ahead, so `\s+(?!\S)` (a run of white
// space that is not followed by a non-space; with backtracking: all of the
// run but its last character when a non-space follows) is coded by hand, as
// are the other alternatives, in the order Oniguruma tries them. Every
// character matches one of the alternatives, so the matches tile the text.

// Exact pattern strings recognised in tokenizer.json files.
const (
	patGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

	patLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

	patQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// knownScanner returns the hand-written matcher of a known pattern, or nil.
func knownScanner(pattern string) func(s string, emit func(start, end int)) {
	switch pattern {
	case patGPT2:
		return scanGPT2
	case patLlama3:
		return func(s string, emit func(int, int)) { scanLlama3(s, 3, emit) }
	case patQwen2:
		return func(s string, emit func(int, int)) { scanLlama3(s, 1, emit) }
	}
	return nil
}

func runeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// runEnd returns the end of the run of characters of class cls from i.
func runEnd(s string, i int, cls uint8) int {
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if asciiClass[c] != cls {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if classOf(r) != cls {
			return i
		}
		i += n
	}
	return i
}

// spaceEnd matches `\s+(?!\S)|\s+` at i, where s[i] is white space.
func spaceEnd(s string, i int) int {
	j, last, count := i, i, 0
	for j < len(s) {
		r, n := runeAt(s, j)
		if !isWS(r) {
			break
		}
		last = j
		j += n
		count++
	}
	if j == len(s) || count < 2 {
		return j
	}
	return last
}

// scanGPT2 matches
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func scanGPT2(s string, emit func(start, end int)) {
	for i := 0; i < len(s); {
		e := gpt2End(s, i)
		emit(i, e)
		i = e
	}
}

func gpt2End(s string, i int) int {
	n := len(s)
	if s[i] == '\'' && i+1 < n {
		switch s[i+1] {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < n && s[i+2] == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < n && s[i+2] == 'l' {
				return i + 3
			}
		}
	}
	j := i
	if s[i] == ' ' && i+1 < n {
		j = i + 1 // the optional space
	}
	r, _ := runeAt(s, j)
	cls := classOf(r)
	if cls != clsWS {
		return runEnd(s, j, cls)
	}
	return spaceEnd(s, i)
}

// scanLlama3 matches the Llama 3 pattern (maxDigits 3) or the Qwen2 one
// (maxDigits 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func scanLlama3(s string, maxDigits int, emit func(start, end int)) {
	for i := 0; i < len(s); {
		e := llama3End(s, i, maxDigits)
		emit(i, e)
		i = e
	}
}

// contractionEnd matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at i (s[i] == '\”)
// with Oniguruma's case folding, where U+017F (ſ) folds to s. It returns 0
// when there is no match.
func contractionEnd(s string, i int) int {
	n := len(s)
	if i+1 >= n {
		return 0
	}
	lower := func(c byte) byte {
		if c >= 'A' && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	switch lower(s[i+1]) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < n && lower(s[i+2]) == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < n && lower(s[i+2]) == 'l' {
			return i + 3
		}
	case 0xC5: // U+017F LATIN SMALL LETTER LONG S is C5 BF
		if i+2 < n && s[i+2] == 0xBF {
			return i + 3
		}
	}
	return 0
}

func llama3End(s string, i, maxDigits int) int {
	n := len(s)
	if s[i] == '\'' {
		if e := contractionEnd(s, i); e > 0 {
			return e
		}
	}
	r0, n0 := runeAt(s, i)
	c0 := classOf(r0)
	switch c0 {
	case clsL:
		return runEnd(s, i, clsL)
	case clsN:
		j := i
		for k := 0; k < maxDigits && j < n; k++ {
			r, m := runeAt(s, j)
			if classOf(r) != clsN {
				break
			}
			j += m
		}
		return j
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+ with the optional character taken.
	if r0 != '\r' && r0 != '\n' && i+n0 < n {
		if r1, _ := runeAt(s, i+n0); classOf(r1) == clsL {
			return runEnd(s, i+n0, clsL)
		}
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	j := i
	if r0 == ' ' && i+1 < n {
		if r1, _ := runeAt(s, i+1); classOf(r1) == clsOther {
			j = i + 1
		}
	}
	if j > i || c0 == clsOther {
		e := runEnd(s, j, clsOther)
		for e < n && (s[e] == '\r' || s[e] == '\n') {
			e++
		}
		return e
	}
	// White space from here on: `\s*[\r\n]+` ends after the run's last
	// line break; else `\s+(?!\S)|\s+`.
	j, last, count, lastNL := i, i, 0, -1
	for j < n {
		r, m := runeAt(s, j)
		if !isWS(r) {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = j
		}
		last = j
		j += m
		count++
	}
	switch {
	case lastNL >= 0:
		return lastNL + 1
	case j == n || count < 2:
		return j
	}
	return last
}
