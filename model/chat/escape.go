package chat

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// unescapeString decodes the body of a string literal the way jinja2 does:
// value.encode("ascii", "backslashreplace").decode("unicode-escape").
// Non-ASCII characters are first turned into \x, \u or \U escapes, then the
// Python escape sequences are decoded.
func unescapeString(raw string) (string, error) {
	if strings.IndexByte(raw, '\\') < 0 {
		return raw, nil // no escapes: the round trip is the identity
	}
	var a strings.Builder
	for _, r := range raw {
		switch {
		case r < utf8.RuneSelf:
			a.WriteByte(byte(r))
		case r <= 0xff:
			fmt.Fprintf(&a, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&a, `\u%04x`, r)
		default:
			fmt.Fprintf(&a, `\U%08x`, r)
		}
	}
	s := a.String()
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(s) {
			return "", errors.New("\\ at end of string")
		}
		i++
		switch e := s[i]; e {
		case '\n':
			// line continuation
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(e - '0')
			for k := 0; k < 2 && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '7'; k++ {
				i++
				v = v*8 + int(s[i]-'0')
			}
			b.WriteRune(rune(v))
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+n > len(s) {
				return "", fmt.Errorf("truncated \\%c escape", e)
			}
			hex := s[i+1 : i+1+n]
			v, err := strconv.ParseUint(hex, 16, 32)
			if err != nil {
				return "", fmt.Errorf("truncated \\%c escape", e)
			}
			if v > 0x10ffff {
				return "", errors.New("illegal Unicode character")
			}
			b.WriteRune(rune(v)) // lone surrogates become U+FFFD
			i += n
		case 'N':
			return "", &UnsupportedError{Construct: `\N{...} escape in a string literal`}
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}
