package dl

import (
	"errors"
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
