package chat

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// strftime formats t like Python's datetime.strftime on a naive local
// datetime under glibc's C locale (what transformers' strftime_now does):
// %z and %Z are empty, glibc's - _ 0 ^ # flags are honoured, unknown
// directives are copied through.
func strftime(t time.Time, format string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		start := i
		i++
		var flag byte
		for i < len(format) && strings.IndexByte("-_0^#", format[i]) >= 0 {
			flag = format[i]
			i++
		}
		if i >= len(format) {
			b.WriteString(format[start:])
			break
		}
		out, ok := strftimeDirective(t, format[i], flag)
		if !ok {
			b.WriteString(format[start : i+1])
			continue
		}
		b.WriteString(out)
		if int64(b.Len()) > maxStringLen {
			return "", errLimit("strftime result too large")
		}
	}
	return b.String(), nil
}

var (
	shortDays   = []string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	shortMonths = []string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)

// num formats n with the default padding pad ('0' or ' ') and width w,
// as modified by a glibc flag.
func num(n, w int, pad, flag byte) string {
	s := strconv.Itoa(n)
	switch flag {
	case '-':
		return s
	case '_':
		pad = ' '
	case '0':
		pad = '0'
	}
	for len(s) < w {
		s = string(pad) + s
	}
	return s
}

func caseFlag(s string, flag byte) string {
	if flag == '^' || flag == '#' {
		return strings.ToUpper(s)
	}
	return s
}

func strftimeDirective(t time.Time, c, flag byte) (string, bool) {
	hour12 := t.Hour() % 12
	if hour12 == 0 {
		hour12 = 12
	}
	wd := int(t.Weekday())
	switch c {
	case 'a':
		return caseFlag(shortDays[wd], flag), true
	case 'A':
		return caseFlag(t.Weekday().String(), flag), true
	case 'b', 'h':
		return caseFlag(shortMonths[t.Month()-1], flag), true
	case 'B':
		return caseFlag(t.Month().String(), flag), true
	case 'c':
		return fmt.Sprintf("%s %s %2d %02d:%02d:%02d %d", shortDays[wd], shortMonths[t.Month()-1], t.Day(), t.Hour(), t.Minute(), t.Second(), t.Year()), true
	case 'C':
		return num(t.Year()/100, 2, '0', flag), true
	case 'd':
		return num(t.Day(), 2, '0', flag), true
	case 'D':
		return fmt.Sprintf("%02d/%02d/%02d", int(t.Month()), t.Day(), t.Year()%100), true
	case 'e':
		return num(t.Day(), 2, ' ', flag), true
	case 'F':
		return fmt.Sprintf("%d-%02d-%02d", t.Year(), int(t.Month()), t.Day()), true
	case 'G':
		y, _ := t.ISOWeek()
		return strconv.Itoa(y), true
	case 'g':
		y, _ := t.ISOWeek()
		return num(y%100, 2, '0', flag), true
	case 'H':
		return num(t.Hour(), 2, '0', flag), true
	case 'I':
		return num(hour12, 2, '0', flag), true
	case 'j':
		return num(t.YearDay(), 3, '0', flag), true
	case 'k':
		return num(t.Hour(), 2, ' ', flag), true
	case 'l':
		return num(hour12, 2, ' ', flag), true
	case 'm':
		return num(int(t.Month()), 2, '0', flag), true
	case 'M':
		return num(t.Minute(), 2, '0', flag), true
	case 'n':
		return "\n", true
	case 'p':
		if t.Hour() < 12 {
			return "AM", true
		}
		return "PM", true
	case 'P':
		if t.Hour() < 12 {
			return "am", true
		}
		return "pm", true
	case 'r':
		ampm := "AM"
		if t.Hour() >= 12 {
			ampm = "PM"
		}
		return fmt.Sprintf("%02d:%02d:%02d %s", hour12, t.Minute(), t.Second(), ampm), true
	case 'R':
		return fmt.Sprintf("%02d:%02d", t.Hour(), t.Minute()), true
	case 's':
		return strconv.FormatInt(t.Unix(), 10), true
	case 'S':
		return num(t.Second(), 2, '0', flag), true
	case 't':
		return "\t", true
	case 'T', 'X':
		return fmt.Sprintf("%02d:%02d:%02d", t.Hour(), t.Minute(), t.Second()), true
	case 'u':
		if wd == 0 {
			return "7", true
		}
		return strconv.Itoa(wd), true
	case 'U':
		return num((t.YearDay()+6-wd)/7, 2, '0', flag), true
	case 'V':
		_, w := t.ISOWeek()
		return num(w, 2, '0', flag), true
	case 'w':
		return strconv.Itoa(wd), true
	case 'W':
		return num((t.YearDay()+6-(wd+6)%7)/7, 2, '0', flag), true
	case 'x':
		return fmt.Sprintf("%02d/%02d/%02d", int(t.Month()), t.Day(), t.Year()%100), true
	case 'y':
		return num(t.Year()%100, 2, '0', flag), true
	case 'Y':
		return strconv.Itoa(t.Year()), true
	case 'f':
		return fmt.Sprintf("%06d", t.Nanosecond()/1000), true
	case 'z', 'Z':
		return "", true // naive datetime
	case '%':
		return "%", true
	}
	return "", false
}
