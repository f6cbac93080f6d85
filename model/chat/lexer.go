package chat

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer follows jinja2.lexer with the environment transformers uses:
// trim_blocks=True (one newline after a block or comment tag is removed),
// lstrip_blocks=True (spaces and tabs before a block or comment tag that
// starts a line are removed), keep_trailing_newline=False (one newline at
// the end of the template is dropped), "-" and "+" whitespace control on
// tags, and all newlines normalised to "\n".

type tokenKind int

const (
	tokEOF tokenKind = iota
	tokData
	tokVarBegin
	tokVarEnd
	tokBlockBegin
	tokBlockEnd
	tokName
	tokString
	tokInt
	tokFloat
	tokOp
)

type token struct {
	kind tokenKind
	val  string // data text, name, decoded string or operator
	num  Value  // int64 or float64 for number tokens
	line int
}

func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "end of template"
	case tokData:
		return "template data"
	case tokVarBegin:
		return "begin of print statement"
	case tokVarEnd:
		return "end of print statement"
	case tokBlockBegin:
		return "begin of statement block"
	case tokBlockEnd:
		return "end of statement block"
	case tokString:
		return "string " + pyStrRepr(t.val)
	case tokInt, tokFloat:
		return pyRepr(t.num)
	}
	return t.val
}

type lexer struct {
	src          string
	pos          int
	line         int
	lineStarting bool // the last match ended with a newline (or nothing was matched yet)
	toks         []token
}

// normalizeSource applies Jinja's newline handling to the template source.
func normalizeSource(src string) string {
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

func lex(src string) ([]token, error) {
	lx := &lexer{src: normalizeSource(src), line: 1, lineStarting: true}
	for lx.pos < len(lx.src) {
		if err := lx.root(); err != nil {
			return nil, err
		}
	}
	lx.emit(tokEOF, "", lx.line)
	return lx.toks, nil
}

func (lx *lexer) emit(kind tokenKind, val string, line int) {
	lx.toks = append(lx.toks, token{kind: kind, val: val, line: line})
}

func (lx *lexer) fail(msg string) error { return &SyntaxError{Line: lx.line, Msg: msg} }

// findOpener returns the index of the next "{{", "{%" or "{#" at or after i.
func (lx *lexer) findOpener(i int) int {
	for {
		j := strings.IndexByte(lx.src[i:], '{')
		if j < 0 {
			return -1
		}
		i += j
		if i+1 < len(lx.src) {
			switch lx.src[i+1] {
			case '{', '%', '#':
				return i
			}
		}
		i++
	}
}

// stripText applies "-" and lstrip_blocks to the data before a tag.
func (lx *lexer) stripText(text string, sign byte, isVariable bool) string {
	if sign == '-' {
		return pyRStrip(text)
	}
	if sign != '+' && !isVariable {
		lpos := strings.LastIndexByte(text, '\n') + 1
		if lpos > 0 || lx.lineStarting {
			if rest := text[lpos:]; rest != "" && allPySpace(rest) {
				return text[:lpos]
			}
		}
	}
	return text
}

// emitData emits text (if any) and advances the line count over orig.
func (lx *lexer) emitData(text, orig string) {
	if text != "" {
		lx.emit(tokData, text, lx.line)
	}
	lx.line += strings.Count(orig, "\n")
}

func (lx *lexer) root() error {
	i := lx.findOpener(lx.pos)
	if i < 0 {
		text := lx.src[lx.pos:]
		lx.emitData(text, text)
		lx.lineStarting = strings.HasSuffix(text, "\n")
		lx.pos = len(lx.src)
		return nil
	}
	text := lx.src[lx.pos:i]
	kind := lx.src[i+1]
	j := i + 2
	var sign byte
	if j < len(lx.src) && (lx.src[j] == '-' || lx.src[j] == '+') {
		sign = lx.src[j]
		j++
	}
	if kind == '%' {
		if end, rsign, ok := lx.matchRawBegin(i); ok {
			lx.emitData(lx.stripText(text, rsign, false), text)
			lx.line += strings.Count(lx.src[i:end], "\n")
			lx.lineStarting = strings.HasSuffix(lx.src[i:end], "\n")
			lx.pos = end
			return lx.raw()
		}
	}
	lx.emitData(lx.stripText(text, sign, kind == '{'), text)
	lx.lineStarting = false
	lx.pos = j
	switch kind {
	case '#':
		return lx.comment()
	case '%':
		lx.emit(tokBlockBegin, "", lx.line)
		return lx.tag(false)
	default:
		lx.emit(tokVarBegin, "", lx.line)
		return lx.tag(true)
	}
}

func (lx *lexer) skipSpace(i int) int {
	for i < len(lx.src) {
		r, n := utf8.DecodeRuneInString(lx.src[i:])
		if !pyIsSpace(r) {
			break
		}
		i += n
	}
	return i
}

// matchRawBegin matches {%(-|+|)\s*raw\s*(-%}\s*|%}) at i.
func (lx *lexer) matchRawBegin(i int) (end int, sign byte, ok bool) {
	p := i + 2
	if p < len(lx.src) && (lx.src[p] == '-' || lx.src[p] == '+') {
		sign = lx.src[p]
		p++
	}
	p = lx.skipSpace(p)
	if !strings.HasPrefix(lx.src[p:], "raw") {
		return 0, 0, false
	}
	p = lx.skipSpace(p + 3)
	switch {
	case strings.HasPrefix(lx.src[p:], "-%}"):
		return lx.skipSpace(p + 3), sign, true
	case strings.HasPrefix(lx.src[p:], "%}"):
		return p + 2, sign, true
	}
	return 0, 0, false
}

// raw lexes the body of {% raw %} up to its {% endraw %}.
func (lx *lexer) raw() error {
	for i := lx.pos; ; i++ {
		j := strings.Index(lx.src[i:], "{%")
		if j < 0 {
			return lx.fail("Missing end of raw directive")
		}
		i += j
		p := i + 2
		var sign byte
		if p < len(lx.src) && (lx.src[p] == '-' || lx.src[p] == '+') {
			sign = lx.src[p]
			p++
		}
		p = lx.skipSpace(p)
		if !strings.HasPrefix(lx.src[p:], "endraw") {
			continue
		}
		p = lx.skipSpace(p + 6)
		end := -1
		switch {
		case strings.HasPrefix(lx.src[p:], "+%}"):
			end = p + 3
		case strings.HasPrefix(lx.src[p:], "-%}"):
			end = lx.skipSpace(p + 3)
		case strings.HasPrefix(lx.src[p:], "%}"):
			end = p + 2
			if end < len(lx.src) && lx.src[end] == '\n' {
				end++
			}
		}
		if end < 0 {
			continue
		}
		text := lx.src[lx.pos:i]
		lx.emitData(lx.stripText(text, sign, false), text)
		lx.line += strings.Count(lx.src[i:end], "\n")
		lx.lineStarting = strings.HasSuffix(lx.src[i:end], "\n")
		lx.pos = end
		return nil
	}
}

// comment skips a {# ... #} comment.
func (lx *lexer) comment() error {
	for k := lx.pos; k < len(lx.src); k++ {
		end := -1
		switch {
		case strings.HasPrefix(lx.src[k:], "+#}"):
			end = k + 3
		case strings.HasPrefix(lx.src[k:], "-#}"):
			end = lx.skipSpace(k + 3)
		case strings.HasPrefix(lx.src[k:], "#}"):
			end = k + 2
			if end < len(lx.src) && lx.src[end] == '\n' {
				end++
			}
		}
		if end >= 0 {
			consumed := lx.src[lx.pos:end]
			lx.line += strings.Count(consumed, "\n")
			lx.lineStarting = strings.HasSuffix(consumed, "\n")
			lx.pos = end
			return nil
		}
	}
	return lx.fail("Missing end of comment tag")
}

var operators2 = []string{"//", "**", "==", "!=", ">=", "<="}

const operators1 = "+-/*%~[](){}><=.:|,;"

// tag lexes the inside of {{ }} (variable) or {% %} up to its end.
func (lx *lexer) tag(variable bool) error {
	var balance []byte
	for lx.pos < len(lx.src) {
		rest := lx.src[lx.pos:]
		if len(balance) == 0 {
			end := -1
			if variable {
				switch {
				case strings.HasPrefix(rest, "-}}"):
					end = lx.skipSpace(lx.pos + 3)
				case strings.HasPrefix(rest, "}}"):
					end = lx.pos + 2
				}
			} else {
				switch {
				case strings.HasPrefix(rest, "+%}"):
					end = lx.pos + 3
				case strings.HasPrefix(rest, "-%}"):
					end = lx.skipSpace(lx.pos + 3)
				case strings.HasPrefix(rest, "%}"):
					end = lx.pos + 2
					if end < len(lx.src) && lx.src[end] == '\n' {
						end++
					}
				}
			}
			if end >= 0 {
				kind := tokBlockEnd
				if variable {
					kind = tokVarEnd
				}
				lx.emit(kind, "", lx.line)
				consumed := lx.src[lx.pos:end]
				lx.line += strings.Count(consumed, "\n")
				lx.lineStarting = strings.HasSuffix(consumed, "\n")
				lx.pos = end
				return nil
			}
		}
		r, n := utf8.DecodeRuneInString(rest)
		switch {
		case pyIsSpace(r):
			end := lx.skipSpace(lx.pos)
			lx.line += strings.Count(lx.src[lx.pos:end], "\n")
			lx.pos = end
		case r >= '0' && r <= '9':
			if err := lx.number(); err != nil {
				return err
			}
		case r == '_' || unicode.IsLetter(r):
			end := lx.pos + n
			for end < len(lx.src) {
				r2, n2 := utf8.DecodeRuneInString(lx.src[end:])
				if r2 != '_' && !unicode.IsLetter(r2) && !unicode.IsDigit(r2) {
					break
				}
				end += n2
			}
			lx.emit(tokName, lx.src[lx.pos:end], lx.line)
			lx.pos = end
		case r == '\'' || r == '"':
			ok, err := lx.str(byte(r))
			if err != nil {
				return err
			}
			if !ok {
				return lx.fail("unexpected char " + pyStrRepr(string(r)) + " at " + strconv.Itoa(lx.pos))
			}
		default:
			op := ""
			for _, o := range operators2 {
				if strings.HasPrefix(rest, o) {
					op = o
					break
				}
			}
			if op == "" && strings.IndexByte(operators1, rest[0]) >= 0 {
				op = rest[:1]
			}
			if op == "" {
				return lx.fail("unexpected char " + pyStrRepr(string(r)) + " at " + strconv.Itoa(lx.pos))
			}
			switch op {
			case "{":
				balance = append(balance, '}')
			case "(":
				balance = append(balance, ')')
			case "[":
				balance = append(balance, ']')
			case "}", ")", "]":
				if len(balance) == 0 {
					return lx.fail("unexpected '" + op + "'")
				}
				want := balance[len(balance)-1]
				balance = balance[:len(balance)-1]
				if want != op[0] {
					return lx.fail("unexpected '" + op + "', expected '" + string(want) + "'")
				}
			}
			lx.emit(tokOp, op, lx.line)
			lx.pos += len(op)
		}
	}
	return nil // unterminated tag: the parser reports the missing end
}

// str lexes a quoted string literal; ok is false if it is unterminated.
func (lx *lexer) str(q byte) (bool, error) {
	p := lx.pos + 1
	for p < len(lx.src) {
		switch lx.src[p] {
		case '\\':
			if p+1 >= len(lx.src) {
				return false, nil
			}
			_, n := utf8.DecodeRuneInString(lx.src[p+1:])
			p += 1 + n
			continue
		case q:
			raw := lx.src[lx.pos+1 : p]
			val, err := unescapeString(raw)
			if ue, ok := err.(*UnsupportedError); ok {
				ue.Line = lx.line
				return false, ue
			}
			if err != nil {
				return false, lx.fail(err.Error())
			}
			lx.emit(tokString, val, lx.line)
			lx.line += strings.Count(raw, "\n")
			lx.pos = p + 1
			return true, nil
		}
		p++
	}
	return false, nil
}

func isDigitBase(c byte, base int) bool {
	switch base {
	case 2:
		return c == '0' || c == '1'
	case 8:
		return c >= '0' && c <= '7'
	case 16:
		return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
	}
	return c >= '0' && c <= '9'
}

// scanDigits matches (\d+_)*\d+ at i and returns its end (i if none).
func (lx *lexer) scanDigits(i int) int {
	if i >= len(lx.src) || !isDigitBase(lx.src[i], 10) {
		return i
	}
	for i < len(lx.src) && isDigitBase(lx.src[i], 10) {
		i++
	}
	for i+1 < len(lx.src) && lx.src[i] == '_' && isDigitBase(lx.src[i+1], 10) {
		i++
		for i < len(lx.src) && isDigitBase(lx.src[i], 10) {
			i++
		}
	}
	return i
}

// scanExponent matches e[+-]?(\d+_)*\d+ at i; it returns i if none.
func (lx *lexer) scanExponent(i int) int {
	if i >= len(lx.src) || (lx.src[i] != 'e' && lx.src[i] != 'E') {
		return i
	}
	p := i + 1
	if p < len(lx.src) && (lx.src[p] == '+' || lx.src[p] == '-') {
		p++
	}
	if e := lx.scanDigits(p); e > p {
		return e
	}
	return i
}

// number lexes a float or integer literal following jinja2's regexes.
func (lx *lexer) number() error {
	start := lx.pos
	// float: (?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+)
	if start == 0 || lx.src[start-1] != '.' {
		intEnd := lx.scanDigits(start)
		end := -1
		fracEnd := -1
		if intEnd < len(lx.src) && lx.src[intEnd] == '.' {
			if fe := lx.scanDigits(intEnd + 1); fe > intEnd+1 {
				fracEnd = fe
			}
		}
		if fracEnd > 0 {
			if e := lx.scanExponent(fracEnd); e > fracEnd {
				end = e
			}
		}
		if end < 0 {
			if e := lx.scanExponent(intEnd); e > intEnd {
				end = e
			}
		}
		if end < 0 && fracEnd > 0 {
			end = fracEnd
		}
		if end > 0 {
			text := strings.ReplaceAll(lx.src[start:end], "_", "")
			f, err := strconv.ParseFloat(text, 64)
			if ne, ok := err.(*strconv.NumError); err != nil && (!ok || ne.Err != strconv.ErrRange) {
				return lx.fail("invalid float literal " + text)
			}
			lx.toks = append(lx.toks, token{kind: tokFloat, val: text, num: f, line: lx.line})
			lx.pos = end
			return nil
		}
	}
	// integer: 0b(_?[01])+ | 0o(_?[0-7])+ | 0x(_?[\da-f])+ | [1-9](_?\d)* | 0(_?0)*
	end := start
	base := 10
	if lx.src[start] == '0' && start+1 < len(lx.src) {
		switch lx.src[start+1] {
		case 'b', 'B':
			base = 2
		case 'o', 'O':
			base = 8
		case 'x', 'X':
			base = 16
		}
	}
	digitsFrom := start
	if base != 10 {
		p := start + 2
		for {
			q := p
			if q < len(lx.src) && lx.src[q] == '_' {
				q++
			}
			if q < len(lx.src) && isDigitBase(lx.src[q], base) {
				p = q + 1
				continue
			}
			break
		}
		if p == start+2 { // no digits: just "0"
			base = 10
		} else {
			end = p
			digitsFrom = start + 2
		}
	}
	if base == 10 {
		only0 := lx.src[start] == '0'
		p := start + 1
		for {
			q := p
			if q < len(lx.src) && lx.src[q] == '_' {
				q++
			}
			if q < len(lx.src) && isDigitBase(lx.src[q], 10) && (!only0 || lx.src[q] == '0') {
				p = q + 1
				continue
			}
			break
		}
		end = p
	}
	text := strings.ReplaceAll(lx.src[digitsFrom:end], "_", "")
	n, err := strconv.ParseInt(text, base, 64)
	if err != nil {
		return &UnsupportedError{Line: lx.line, Construct: "integer literal beyond 64 bits"}
	}
	lx.toks = append(lx.toks, token{kind: tokInt, val: lx.src[start:end], num: n, line: lx.line})
	lx.pos = end
	return nil
}
