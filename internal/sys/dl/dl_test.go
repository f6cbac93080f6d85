package dl

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

func TestOpenMissingLibrary(t *testing.T) {
	_, err := Open("nothing", []string{"libchorus-does-not-exist.so.9"}, []string{"f"})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "libchorus-does-not-exist") {
		t.Fatalf("Open: %v", err)
	}
}

func TestOpenNamesMissingSymbols(t *testing.T) {
	l, err := Open("libc", []string{"libc.so.6"}, []string{"strlen", "chorus_no_such_symbol", "chorus_nor_this"})
	if err == nil || !strings.Contains(err.Error(), "chorus_no_such_symbol, chorus_nor_this") {
		t.Fatalf("Open: %v, %v", l, err)
	}
	l, err = Open("libc", []string{"libc.so.6"}, []string{"strlen"})
	if err != nil || l.Sym("strlen") == 0 || l.Name != "libc.so.6" {
		t.Fatalf("Open libc: %v, %v", l, err)
	}
}

func TestCString(t *testing.T) {
	b := []byte("hello\x00world")
	if got := CString(uintptr(unsafe.Pointer(&b[0]))); got != "hello" {
		t.Errorf("CString = %q", got)
	}
	if CString(0) != "" {
		t.Error("CString(0) not empty")
	}
}

// TestCaller calls libc through a Caller: abs returns its argument, so a
// zero is success and anything else a status that fail describes, with
// the name and status; strerror returns a string owned by libc.
func TestCaller(t *testing.T) {
	l, err := Open("libc", []string{"libc.so.6"}, []string{"abs", "strerror"})
	if err != nil {
		t.Skipf("no libc.so.6 to call: %v", err)
	}
	errStatus := errors.New("status")
	c := NewCaller(l, func(fn string, status int32) error {
		return fmt.Errorf("%s: %w %d (%s)", fn, errStatus, status, "x")
	})
	cases := []struct {
		arg  int32
		want string // "" for success
	}{
		{0, ""},
		{-7, "abs: status 7 (x)"},
		{int32(-1 << 31), "abs: status -2147483648 (x)"}, // abs overflows back to itself
	}
	for _, tc := range cases {
		err := c.Call("abs", uintptr(uint32(tc.arg))) // C int: the low 32 bits
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want || !errors.Is(err, errStatus)) {
			t.Errorf("Call(abs, %d) = %v, want %q", tc.arg, err, tc.want)
		}
	}
	if err := c.Check("named", c.Sym("abs"), 3); err == nil || !strings.HasPrefix(err.Error(), "named: ") {
		t.Errorf("Check names the call as asked: %v", err)
	}
	if s := c.Str("none", "strerror", 2); s != "No such file or directory" {
		t.Errorf("Str(strerror, 2) = %q", s)
	}
	if s := c.Str("none", "not_resolved", 2); s != "none" {
		t.Errorf("Str of a symbol not resolved = %q, want the default", s)
	}
}
