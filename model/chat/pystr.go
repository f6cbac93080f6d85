package chat

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// pyStr is Python's str(v) as Jinja prints it: undefined prints as "".
func pyStr(v Value) string {
	switch v := v.(type) {
	case string:
		return v
	case undefined:
		return ""
	}
	return pyRepr(v)
}

// pyRepr is Python's repr(v).
func pyRepr(v Value) string {
	var b strings.Builder
	writeRepr(&b, v, 0)
	return b.String()
}

// writeRepr stops writing once the text exceeds maxStringLen: callers
// then fail on the size limit.
func writeRepr(b *strings.Builder, v Value, depth int) {
	if depth > maxNesting {
		b.WriteString("...")
		return
	}
	if int64(b.Len()) > maxStringLen {
		return
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if v {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		b.WriteString(pyFloatRepr(v))
	case string:
		b.WriteString(pyStrRepr(v))
	case []Value:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e, depth+1)
		}
		b.WriteByte(']')
	case tuple:
		b.WriteByte('(')
		for i, e := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e, depth+1)
		}
		if len(v) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case *dict:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, k, depth+1)
			b.WriteString(": ")
			writeRepr(b, v.vals[i], depth+1)
		}
		b.WriteByte('}')
	case undefined:
		b.WriteString("Undefined")
	case *namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, v.attrs, depth+1)
		b.WriteByte('>')
	case *loopInfo:
		fmt.Fprintf(b, "<LoopContext %d/%d>", v.index0+1, len(v.items))
	case *function:
		fmt.Fprintf(b, "<built-in function %s>", v.name)
	case *iterator:
		fmt.Fprintf(b, "<%s object>", v.kind)
	case *dictView:
		b.WriteString("dict_" + v.kind + "(")
		writeRepr(b, v.items, depth+1)
		b.WriteByte(')')
	case rangeVal:
		if v.step == 1 {
			fmt.Fprintf(b, "range(%d, %d)", v.start, v.stop)
		} else {
			fmt.Fprintf(b, "range(%d, %d, %d)", v.start, v.stop, v.step)
		}
	default:
		fmt.Fprintf(b, "<%T>", v)
	}
}

// pyStrRepr is repr() of a str: single quotes unless the text has a single
// quote and no double quote; non-printable characters escaped.
func pyStrRepr(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x7f:
			b.WriteRune(r)
		case pyIsPrintable(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// pyIsPrintable approximates str.isprintable for one non-ASCII rune.
func pyIsPrintable(r rune) bool {
	if r == utf8.RuneError {
		return true
	}
	return unicode.IsPrint(r)
}

// pyFloatRepr is Python's repr(float): the shortest round-tripping digits,
// in positional form when the decimal exponent is in (-4, 16].
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±XX
	neg := ""
	if s[0] == '-' {
		neg, s = "-", s[1:]
	}
	e := strings.IndexByte(s, 'e')
	mant, expStr := s[:e], s[e+1:]
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	decpt := exp + 1
	if decpt > -4 && decpt <= 16 {
		switch {
		case decpt <= 0:
			return neg + "0." + strings.Repeat("0", -decpt) + digits
		case decpt >= len(digits):
			return neg + digits + strings.Repeat("0", decpt-len(digits)) + ".0"
		default:
			return neg + digits[:decpt] + "." + digits[decpt:]
		}
	}
	out := neg + digits[:1]
	if len(digits) > 1 {
		out += "." + digits[1:]
	}
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	es := strconv.Itoa(exp)
	if len(es) < 2 {
		es = "0" + es
	}
	return out + "e" + sign + es
}

// pyIsSpace is str.isspace for one rune (also what re's \s matches).
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

func allPySpace(s string) bool {
	for _, r := range s {
		if !pyIsSpace(r) {
			return false
		}
	}
	return true
}

// pyStrip is str.strip/lstrip/rstrip: with chars == nil it strips
// whitespace, otherwise any rune in *chars.
func pyStrip(s string, chars *string, left, right bool) string {
	isCut := pyIsSpace
	if chars != nil {
		set := *chars
		isCut = func(r rune) bool { return strings.ContainsRune(set, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, isCut)
	}
	if right {
		s = strings.TrimRightFunc(s, isCut)
	}
	return s
}

func pyRStrip(s string) string { return strings.TrimRightFunc(s, pyIsSpace) }

// pySplitWhitespace is str.split() with no separator.
func pySplitWhitespace(s string, maxsplit int) []string {
	var out []string
	i := 0
	rs := []rune(s)
	for {
		for i < len(rs) && pyIsSpace(rs[i]) {
			i++
		}
		if i >= len(rs) {
			return out
		}
		if maxsplit >= 0 && len(out) == maxsplit {
			rest := strings.TrimRightFunc(string(rs[i:]), pyIsSpace)
			return append(out, rest)
		}
		j := i
		for j < len(rs) && !pyIsSpace(rs[j]) {
			j++
		}
		out = append(out, string(rs[i:j]))
		i = j
	}
}

// pyRSplitWhitespace is str.rsplit() with no separator.
func pyRSplitWhitespace(s string, maxsplit int) []string {
	rs := []rune(s)
	var rev []string
	j := len(rs)
	for {
		for j > 0 && pyIsSpace(rs[j-1]) {
			j--
		}
		if j == 0 {
			break
		}
		if maxsplit >= 0 && len(rev) == maxsplit {
			rev = append(rev, strings.TrimLeftFunc(string(rs[:j]), pyIsSpace))
			break
		}
		i := j
		for i > 0 && !pyIsSpace(rs[i-1]) {
			i--
		}
		rev = append(rev, string(rs[i:j]))
		j = i
	}
	out := make([]string, len(rev))
	for i, s := range rev {
		out[len(rev)-1-i] = s
	}
	return out
}

// isLineBreak reports the separators str.splitlines splits on.
func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

// pySplitlines is str.splitlines(keepends).
func pySplitlines(s string, keepends bool) []string {
	var out []string
	rs := []rune(s)
	start := 0
	for i := 0; i < len(rs); i++ {
		if !isLineBreak(rs[i]) {
			continue
		}
		end := i + 1
		if rs[i] == '\r' && i+1 < len(rs) && rs[i+1] == '\n' {
			end = i + 2
		}
		if keepends {
			out = append(out, string(rs[start:end]))
		} else {
			out = append(out, string(rs[start:i]))
		}
		start = end
		i = end - 1
	}
	if start < len(rs) {
		out = append(out, string(rs[start:]))
	}
	return out
}

// pyUpper and pyLower follow str.upper/str.lower, including the common
// one-to-many mappings Go's per-rune case mapping lacks.
func pyUpper(s string) string {
	if strings.ContainsRune(s, 'ß') {
		s = strings.ReplaceAll(s, "ß", "SS")
	}
	return strings.ToUpper(s)
}

func pyLower(s string) string {
	if strings.ContainsRune(s, 'İ') {
		s = strings.ReplaceAll(s, "İ", "i\u0307")
	}
	return strings.ToLower(s)
}

// pyCapitalize is str.capitalize: first character title-cased, the rest
// lower-cased.
func pyCapitalize(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToTitle(r)) + pyLower(s[n:])
}

// pyIsCased / pyIsLower / pyIsUpper follow str.islower / str.isupper.
func pyIsLower(s string) bool {
	cased := false
	for _, r := range s {
		if unicode.IsUpper(r) || unicode.IsTitle(r) {
			return false
		}
		if unicode.IsLower(r) {
			cased = true
		}
	}
	return cased
}

func pyIsUpper(s string) bool {
	cased := false
	for _, r := range s {
		if unicode.IsLower(r) || unicode.IsTitle(r) {
			return false
		}
		if unicode.IsUpper(r) {
			cased = true
		}
	}
	return cased
}

// jinjaTitle is Jinja's title filter: each word (split at whitespace and
// the characters -([{<) gets its first character upper-cased and the rest
// lower-cased.
func jinjaTitle(s string) string {
	var b strings.Builder
	startWord := true
	for _, r := range s {
		isSep := pyIsSpace(r) || strings.ContainsRune("-({[<", r)
		switch {
		case isSep:
			b.WriteRune(r)
			startWord = true
		case startWord:
			b.WriteString(pyUpper(string(r)))
			startWord = false
		default:
			b.WriteString(pyLower(string(r)))
		}
	}
	return b.String()
}
