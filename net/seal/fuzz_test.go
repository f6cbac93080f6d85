package seal

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzRead feeds a reader a valid sealed prefix followed by arbitrary
// bytes (or arbitrary bytes alone, when whole is set), in reads of an
// arbitrary size. It must never panic, return exactly the prefix's
// plaintext (no unauthenticated byte), and end with io.EOF, ErrAuth,
// ErrFrame or io.ErrUnexpectedEOF, the same error on every later Read.
func FuzzRead(f *testing.F) {
	kc, ks := keyPair(f, "fuzz", "ctx")
	msgs := [][]byte{pattern(3, 1), pattern(300, 2)}
	prefix := sealStream(f, kc, msgs...)
	next := sealStream(f, kc, msgs[0], msgs[1], pattern(40, 3))[len(prefix):] // the valid third record
	f.Add([]byte{}, uint16(1), false)
	f.Add([]byte{}, uint16(1000), true)
	f.Add(next, uint16(7), false)
	f.Add(next[:10], uint16(64), false)
	f.Add([]byte{0, 0, 0, 17}, uint16(64), false)
	f.Add([]byte{0, 4, 0, 16, 1, 2, 3}, uint16(64), false)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, uint16(2), false)
	f.Add(prefix, uint16(100), true)
	f.Add(append(bytes.Clone(prefix), 0, 0), uint16(5), true)
	valid := records(f, append(bytes.Clone(prefix), next...))
	plain := [][]byte{msgs[0], msgs[1], pattern(40, 3)}
	f.Fuzz(func(t *testing.T, tail []byte, size uint16, whole bool) {
		stream := append(bytes.Clone(prefix), tail...)
		if whole {
			stream = tail
		}
		// Only the records sealed with the key, in their order, can read
		// back: good is the plaintext of the leading ones the stream
		// holds. Anything more would be a forgery.
		var good []byte
		rest := stream
		for i, r := range valid {
			if !bytes.HasPrefix(rest, r) {
				break
			}
			good, rest = append(good, plain[i]...), rest[len(r):]
		}
		got, err := readAll(t, New(nil, bytes.NewReader(stream), ks), int(size)+1)
		if !bytes.Equal(got, good) {
			t.Fatalf("read %d bytes %q, want %d", len(got), got, len(good))
		}
		if err != io.EOF && !errors.Is(err, ErrAuth) && !errors.Is(err, ErrFrame) && err != io.ErrUnexpectedEOF {
			t.Fatalf("error %v", err)
		}
	})
}
