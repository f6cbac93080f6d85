package seal

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
)

// TestDerive: both ends of a session derive mirrored keys; bad exporters
// fail with an error, never keys.
func TestDerive(t *testing.T) {
	c, s := keyPair(t, "session", "hello")
	if c.send != s.recv || c.recv != s.send || c.send == c.recv || !c.ok || !s.ok {
		t.Fatalf("keys not mirrored: client %x/%x server %x/%x", c.send, c.recv, s.send, s.recv)
	}
	other, _ := keyPair(t, "session", "hello2")
	if other.send == c.send || other.recv == c.recv {
		t.Fatal("another context gave the same keys")
	}
	boom := errors.New("boom")
	var nilState *tls.ConnectionState
	for _, tc := range []struct {
		name string
		ex   Exporter
		is   error
	}{
		{"nil exporter", nil, nil},
		{"nil state", nilState, nil},
		{"handshake not complete", &tls.ConnectionState{}, nil},
		{"TLS 1.2", &tls.ConnectionState{HandshakeComplete: true, Version: tls.VersionTLS12}, nil},
		{"exporter error", errEx{boom}, boom},
		{"short material", shortEx{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := Derive(tc.ex, []byte("ctx"), true)
			if err == nil || k.ok {
				t.Fatalf("Derive = %+v, %v; want an error", k.ok, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v does not wrap %v", err, tc.is)
			}
		})
	}
}

// TestZeroKeys: a Conn made without Derive refuses to send or receive.
func TestZeroKeys(t *testing.T) {
	s := &sink{}
	c := New(s, bytes.NewReader([]byte{1, 2, 3, 4}), Keys{})
	if _, err := c.Write([]byte("x")); !errors.Is(err, errNoKeys) {
		t.Fatalf("Write: %v", err)
	}
	if err := c.Flush(); !errors.Is(err, errNoKeys) {
		t.Fatalf("Flush: %v", err)
	}
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, errNoKeys) {
		t.Fatalf("Read: %v", err)
	}
	if s.writes != 0 {
		t.Fatal("sent bytes without keys")
	}
}

// TestWriteBatching: records collect in the output buffer and leave in
// one Write of the connection per full buffer or Flush; an empty Flush
// sends nothing; record sizes follow the writes; the buffer grows from
// one record to four as full records fill it.
func TestWriteBatching(t *testing.T) {
	kc, ks := keyPair(t, "s", "c")
	for _, tc := range []struct {
		name       string
		writes     []int // negative: Flush
		wantWrites int   // Writes of the connection at the end
		wantRecs   []int // plaintext sizes of the records sent
	}{
		{"empty flush", []int{-1, -1}, 0, nil},
		{"small unflushed", []int{10}, 0, nil},
		{"small flushed", []int{10, -1, -1}, 1, []int{10}},
		{"small pieces make one record", []int{10, 20, 30, -1}, 1, []int{60}},
		// The output buffer starts at one record and doubles to bufLen
		// (four records) each time full records fill it.
		{"one record fills the first buffer", []int{RecordMax}, 1, []int{RecordMax}},
		{"one record flushed", []int{RecordMax, -1}, 1, []int{RecordMax}},
		{"full buffers leave without flush", []int{4 * RecordMax}, 2, []int{RecordMax, RecordMax, RecordMax}},
		{"full buffers then flush", []int{4 * RecordMax, -1}, 3, []int{RecordMax, RecordMax, RecordMax, RecordMax}},
		{"grown buffer sends four records at once", []int{8 * RecordMax, -1}, 4, []int{RecordMax, RecordMax, RecordMax, RecordMax, RecordMax, RecordMax, RecordMax, RecordMax}},
		{"header before payload closes a short record", []int{16, 2 * RecordMax, -1}, 3, []int{16, RecordMax, RecordMax}},
		{"small pieces fill records", []int{RecordMax - 1, 2, -1}, 2, []int{RecordMax, 1}},
		{"large write tail", []int{RecordMax + 5, -1}, 2, []int{RecordMax, 5}},
		{"five records", []int{5 * RecordMax, -1}, 3, []int{RecordMax, RecordMax, RecordMax, RecordMax, RecordMax}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &sink{}
			c := New(s, nil, kc)
			var want []byte
			for i, n := range tc.writes {
				if n < 0 {
					if err := c.Flush(); err != nil {
						t.Fatal(err)
					}
					continue
				}
				p := pattern(n, byte(i))
				if got, err := c.Write(p); got != n || err != nil {
					t.Fatalf("Write(%d) = %d, %v", n, got, err)
				}
				want = append(want, p...)
			}
			if s.writes != tc.wantWrites {
				t.Fatalf("%d writes of the connection, want %d", s.writes, tc.wantWrites)
			}
			var sizes []int
			for _, r := range records(t, s.buf) {
				sizes = append(sizes, len(r)-Overhead)
			}
			if fmt.Sprint(sizes) != fmt.Sprint(tc.wantRecs) {
				t.Fatalf("records %v, want %v", sizes, tc.wantRecs)
			}
			got, err := io.ReadAll(New(nil, bytes.NewReader(s.buf), ks))
			if err != nil {
				t.Fatal(err)
			}
			if sent := len(s.buf) - len(sizes)*Overhead; !bytes.Equal(got, want[:sent]) {
				t.Fatalf("read %d bytes, not the %d sent", len(got), sent)
			}
		})
	}
}

// TestWriteErrorSticky: after the connection fails a Write, every later
// Write and Flush returns that error.
func TestWriteErrorSticky(t *testing.T) {
	kc, _ := keyPair(t, "s", "c")
	boom := errors.New("boom")
	s := &sink{err: boom}
	c := New(s, nil, kc)
	if _, err := c.Write(make([]byte, 10)); err != nil {
		t.Fatal(err) // buffered
	}
	if err := c.Flush(); !errors.Is(err, boom) {
		t.Fatalf("Flush: %v", err)
	}
	s.err = nil
	if _, err := c.Write(make([]byte, 4*RecordMax)); !errors.Is(err, boom) {
		t.Fatalf("Write after error: %v", err)
	}
	if err := c.Flush(); !errors.Is(err, boom) {
		t.Fatalf("Flush after error: %v", err)
	}
	if s.writes != 0 {
		t.Fatal("wrote after the error")
	}
}

// TestReadSizes: reads into buffers smaller than, equal to and larger
// than the records return the bytes in order.
func TestReadSizes(t *testing.T) {
	kc, ks := keyPair(t, "s", "c")
	msgs := [][]byte{pattern(1, 1), pattern(RecordMax, 2), pattern(1000, 3), pattern(3*RecordMax+7, 4)}
	stream := sealStream(t, kc, msgs...)
	want := join(msgs...)
	for _, size := range []int{1, 7, 999, 1000, 1001, RecordMax - 1, RecordMax, RecordMax + 1, 5 * RecordMax} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := New(nil, bytes.NewReader(stream), ks)
			var got []byte
			buf := make([]byte, size)
			for {
				n, err := c.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("got %d bytes, want %d (equal prefix: %v)", len(got), len(want), bytes.HasPrefix(want, got))
			}
			if n, err := c.Read(buf); n != 0 || err != io.EOF {
				t.Fatalf("Read after EOF = %d, %v", n, err)
			}
		})
	}
}

// oneByteReader returns one byte per Read: records arrive in pieces.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}

// TestReadInPieces: records that arrive a byte at a time, and bytes put
// in front with r, read back exactly.
func TestReadInPieces(t *testing.T) {
	kc, ks := keyPair(t, "s", "c")
	msgs := [][]byte{pattern(5, 1), pattern(3000, 2), pattern(17, 3)}
	stream := sealStream(t, kc, msgs...)
	got, err := io.ReadAll(New(nil, oneByteReader{bytes.NewReader(stream)}, ks))
	if err != nil || !bytes.Equal(got, join(msgs...)) {
		t.Fatalf("one byte at a time: %d bytes, %v", len(got), err)
	}
	r := io.MultiReader(bytes.NewReader(stream[:100]), bytes.NewReader(stream[100:]))
	got, err = io.ReadAll(New(nil, r, ks))
	if err != nil || !bytes.Equal(got, join(msgs...)) {
		t.Fatalf("two readers: %d bytes, %v", len(got), err)
	}
}

// readAll reads c to its end or first error, in reads of size bytes,
// and checks that a later Read returns the same error and nothing.
func readAll(t *testing.T, c *Conn, size int) ([]byte, error) {
	t.Helper()
	var got []byte
	buf := make([]byte, size)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			if n2, err2 := c.Read(buf); n2 != 0 || err2 != err {
				t.Fatalf("Read after %v = %d, %v", err, n2, err2)
			}
			return got, err
		}
	}
}

// TestTamper: a flipped byte anywhere, a replayed, swapped or dropped
// record, a foreign key or a cut stream never reads as data: the bytes
// before the damage read back, then the right error, for good.
func TestTamper(t *testing.T) {
	kc, ks := keyPair(t, "s", "c")
	msgs := [][]byte{pattern(100, 1), pattern(RecordMax, 2), pattern(5000, 3), pattern(1, 4)}
	stream := sealStream(t, kc, msgs...)
	recs := records(t, stream)
	want := join(msgs...)
	prefix := func(i int) []byte { return join(msgs[:i]...) } // plaintext of records before i

	type tcase struct {
		name   string
		stream []byte
		keys   Keys
		good   []byte // what must read back before the error
		is     error  // nil: the stream reads to io.EOF
	}
	cases := []tcase{
		{"intact", stream, ks, want, nil},
		{"replay first", join(recs[0], recs[0], recs[1]), ks, prefix(1), ErrAuth},
		{"replay later", join(recs[0], recs[1], recs[1], recs[2]), ks, prefix(2), ErrAuth},
		{"swap", join(recs[1], recs[0], recs[2], recs[3]), ks, nil, ErrAuth},
		{"swap later", join(recs[0], recs[2], recs[1], recs[3]), ks, prefix(1), ErrAuth},
		{"drop first", join(recs[1], recs[2], recs[3]), ks, nil, ErrAuth},
		{"drop middle", join(recs[0], recs[1], recs[3]), ks, prefix(2), ErrAuth},
		{"cut at a boundary", join(recs[0], recs[1]), ks, prefix(2), nil},
		{"cut in a header", join(recs[0], recs[1][:2]), ks, prefix(1), io.ErrUnexpectedEOF},
		{"cut after a header", join(recs[0], recs[1][:4]), ks, prefix(1), io.ErrUnexpectedEOF},
		{"cut in a body", join(recs[0], recs[1][:1000]), ks, prefix(1), io.ErrUnexpectedEOF},
		{"cut before the tag's end", stream[:len(stream)-1], ks, prefix(3), io.ErrUnexpectedEOF},
		{"own keys (reflection)", stream, kc, nil, ErrAuth},
		{"header too long", join(recs[0], []byte{0, 4, 0, 0x11}), ks, prefix(1), ErrFrame},
		{"header zero", join(recs[0], []byte{0, 0, 0, 0}), ks, prefix(1), ErrFrame},
		{"header tag only", []byte{0, 0, 0, 16}, ks, nil, ErrFrame},
		{"header max", []byte{0xff, 0xff, 0xff, 0xff}, ks, nil, ErrFrame},
	}
	// Keys of another context, another session, both ends claiming to
	// be the client.
	for _, k := range []struct {
		name          string
		session, ctxt string
		client        bool
	}{{"other context", "s", "c2", false}, {"other session", "s2", "c", false}, {"both client", "s", "c", true}} {
		key, err := Derive(fakeEx{k.session}, []byte(k.ctxt), k.client)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, tcase{k.name, stream, key, nil, ErrAuth})
	}
	// One flipped bit at every header byte, the first and last bytes of
	// every body and random places.
	rng := rand.New(rand.NewPCG(1, 2))
	var places []int
	off := 0
	for _, r := range recs {
		for i := range min(24, len(r)) {
			places = append(places, off+i, off+len(r)-1-i)
		}
		off += len(r)
	}
	for range 64 {
		places = append(places, rng.IntN(len(stream)))
	}
	for _, at := range places {
		bad := bytes.Clone(stream)
		bad[at] ^= 1 << rng.IntN(8)
		rec, start := 0, 0
		for start+len(recs[rec]) <= at {
			start += len(recs[rec])
			rec++
		}
		is := ErrAuth
		if at-start < hdrLen {
			is = nil // a bad length may be ErrFrame, ErrAuth or a cut stream
		}
		cases = append(cases, tcase{fmt.Sprintf("flip %d (record %d)", at, rec), bad, ks, prefix(rec), is})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{100, RecordMax, 2 * RecordMax} {
				got, err := readAll(t, New(nil, bytes.NewReader(tc.stream), tc.keys), size)
				if !bytes.Equal(got, tc.good) {
					t.Fatalf("read %d bytes, want the %d before the damage", len(got), len(tc.good))
				}
				switch {
				case tc.is != nil && !errors.Is(err, tc.is):
					t.Fatalf("error %v, want %v", err, tc.is)
				case tc.is == nil && len(tc.good) == len(want) && err != io.EOF:
					t.Fatalf("error %v, want io.EOF", err)
				case tc.is == nil && strings(tc.name, "flip") && !(errors.Is(err, ErrAuth) || errors.Is(err, ErrFrame) || err == io.ErrUnexpectedEOF):
					t.Fatalf("error %v, want ErrAuth, ErrFrame or io.ErrUnexpectedEOF", err)
				}
			}
		})
	}
}

func strings(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

// segReader returns its segments one per Read and counts the Reads.
type segReader struct {
	segs  [][]byte
	reads int
}

func (s *segReader) Read(p []byte) (int, error) {
	s.reads++
	if len(s.segs) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.segs[0])
	if s.segs[0] = s.segs[0][n:]; len(s.segs[0]) == 0 {
		s.segs = s.segs[1:]
	}
	return n, nil
}

// TestFrameBeforeBody: a header out of range fails before its body is
// asked for.
func TestFrameBeforeBody(t *testing.T) {
	_, ks := keyPair(t, "s", "c")
	for _, l := range []uint32{0, 1, 16, bodyMax + 1, 1 << 31, math.MaxUint32} {
		t.Run(fmt.Sprint(l), func(t *testing.T) {
			hdr := []byte{byte(l >> 24), byte(l >> 16), byte(l >> 8), byte(l)}
			r := &segReader{segs: [][]byte{hdr[:1], hdr[1:], make([]byte, 1<<20)}}
			c := New(nil, r, ks)
			_, err := readAll(t, c, 1<<20)
			if !errors.Is(err, ErrFrame) {
				t.Fatalf("error %v, want ErrFrame", err)
			}
			if r.reads != 2 || len(r.segs) != 1 {
				t.Fatalf("%d reads of r, %d segments left: the body was read", r.reads, len(r.segs))
			}
		})
	}
}

// errReader returns its bytes, then err.
type errReader struct {
	b   []byte
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	if len(e.b) == 0 {
		return 0, e.err
	}
	n := copy(p, e.b)
	e.b = e.b[n:]
	return n, nil
}

// TestReaderError: an error of r inside a record or at a boundary breaks
// the Conn with that error; a reader that returns nothing forever fails
// with io.ErrNoProgress.
func TestReaderError(t *testing.T) {
	kc, ks := keyPair(t, "s", "c")
	stream := sealStream(t, kc, pattern(10, 1), pattern(10, 2))
	boom := errors.New("boom")
	for _, cut := range []int{0, 3, 20, 30, 31} {
		c := New(nil, &errReader{b: stream[:cut], err: boom}, ks)
		got, err := readAll(t, c, 64)
		if !errors.Is(err, boom) || len(got) != 10*(cut/30) {
			t.Fatalf("cut %d: read %d bytes, %v", cut, len(got), err)
		}
	}
	c := New(nil, &errReader{err: nil}, ks)
	if _, err := readAll(t, c, 64); err != io.ErrNoProgress {
		t.Fatalf("empty reads: %v", err)
	}
}

// TestEpochs: records across many epochs read back; a sender whose
// counter jumps to a later epoch, or a receiver that does not change
// keys, fails authentication.
func TestEpochs(t *testing.T) {
	old := EpochRecords
	t.Cleanup(func() { EpochRecords = old })
	EpochRecords = 3
	kc, ks := keyPair(t, "s", "c")
	var msgs [][]byte
	for i := range 20 {
		msgs = append(msgs, pattern(1+i*37, byte(i)))
	}
	stream := sealStream(t, kc, msgs...)
	if got, err := io.ReadAll(New(nil, bytes.NewReader(stream), ks)); err != nil || !bytes.Equal(got, join(msgs...)) {
		t.Fatalf("across epochs: %d bytes, %v", len(got), err)
	}

	// The receiver keeps one key: record 3 (epoch 1) fails.
	EpochRecords = 1 << 20
	got, err := readAll(t, New(nil, bytes.NewReader(stream), ks), 1<<10)
	if !errors.Is(err, ErrAuth) || !bytes.Equal(got, join(msgs[:3]...)) {
		t.Fatalf("without rekeying: %d bytes, %v", len(got), err)
	}
	EpochRecords = 3

	// The sender skips epochs 0 and 1.
	for _, jump := range []uint64{3, 6, 7} {
		s := &sink{}
		w := New(s, nil, kc)
		w.send.seq = jump
		w.Write([]byte("skipped"))
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		got, err := readAll(t, New(nil, bytes.NewReader(s.buf), ks), 64)
		if !errors.Is(err, ErrAuth) || len(got) != 0 {
			t.Fatalf("jump to %d: %q, %v", jump, got, err)
		}
	}
}

// TestCounterEnd: the last record number is never used; the Conn fails
// instead, for good.
func TestCounterEnd(t *testing.T) {
	kc, ks := keyPair(t, "s", "c")
	s := &sink{}
	w := New(s, nil, kc)
	w.send.seq = math.MaxUint64 - 1
	w.Write([]byte("last"))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("one too many"))
	if err := w.Flush(); !errors.Is(err, errExhausted) {
		t.Fatalf("Flush: %v", err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, errExhausted) {
		t.Fatalf("Write: %v", err)
	}
	r := New(nil, bytes.NewReader(s.buf), ks)
	r.recv.seq = math.MaxUint64 - 1
	buf := make([]byte, 16)
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "last" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	// The reader refuses a record numbered MaxUint64 too.
	r2 := New(nil, bytes.NewReader(s.buf), ks)
	r2.recv.seq = math.MaxUint64
	if _, err := r2.Read(buf); !errors.Is(err, errExhausted) {
		t.Fatalf("Read past the end: %v", err)
	}
}

// TestRealTLS: ends keyed from a real TLS 1.3 session talk; a context or
// role mismatch fails authentication on the first record.
func TestRealTLS(t *testing.T) {
	leaktest.Check(t)
	for _, tc := range []struct {
		name           string
		ctxCli, ctxSrv string
		cliC, srvC     bool
		ok             bool
	}{
		{"matching", "hello", "hello", true, false, true},
		{"other context", "hello", "hellO", true, false, false},
		{"both client", "hello", "hello", true, true, false},
		{"both server", "hello", "hello", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, srv := sealPair(t, tc.ctxCli, tc.ctxSrv, tc.cliC, tc.srvC)
			defer cli.Close()
			defer srv.Close()
			msg := pattern(RecordMax+100, 9)
			errc := make(chan error, 1)
			go func() {
				_, err := cli.Write(msg)
				if err == nil {
					err = cli.Flush()
				}
				errc <- err
			}()
			got := make([]byte, len(msg))
			_, err := io.ReadFull(srv, got)
			if werr := <-errc; werr != nil {
				t.Fatal(werr)
			}
			switch {
			case tc.ok && (err != nil || !bytes.Equal(got, msg)):
				t.Fatalf("read: %v", err)
			case !tc.ok && !errors.Is(err, ErrAuth):
				t.Fatalf("read: %v, want ErrAuth", err)
			}
		})
	}
}

// TestDuplex is the property test: both directions at once over a real
// TLS session, random write sizes (1 byte to 3 RecordMax, with exact
// RecordMax writes), random Flush points and random read sizes; every
// byte must arrive, in order.
func TestDuplex(t *testing.T) {
	leaktest.Check(t)
	total := 6 << 20
	if testing.Short() {
		total = 2 << 20
	}
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			cli, srv := sealPair(t, "duplex", "duplex", true, false)
			defer cli.Close()
			defer srv.Close()
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			report := func(err error) {
				if err != nil {
					cli.Close() // the other goroutines stop too
					srv.Close()
				}
				errs <- err
			}
			for i, dir := range []struct{ w, r *Conn }{{cli, srv}, {srv, cli}} {
				data := pattern(total, byte(seed*2+uint64(i)))
				wg.Add(2)
				go func() {
					defer wg.Done()
					report(duplexWrite(dir.w, data, rand.New(rand.NewPCG(seed, uint64(i)))))
				}()
				go func() {
					defer wg.Done()
					report(duplexRead(dir.r, data, rand.New(rand.NewPCG(seed, uint64(i)+10))))
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func duplexWrite(c *Conn, data []byte, rng *rand.Rand) error {
	for len(data) > 0 {
		var n int
		switch rng.IntN(6) {
		case 0:
			n = RecordMax
		case 1:
			n = 1 + rng.IntN(64)
		case 2:
			n = RecordMax - 8 + rng.IntN(17)
		default:
			n = 1 + rng.IntN(3*RecordMax)
		}
		n = min(n, len(data))
		if m, err := c.Write(data[:n]); m != n || err != nil {
			return fmt.Errorf("Write(%d) = %d, %v", n, m, err)
		}
		data = data[n:]
		if rng.IntN(3) == 0 {
			if err := c.Flush(); err != nil {
				return fmt.Errorf("Flush: %v", err)
			}
		}
	}
	return c.Flush()
}

func duplexRead(c *Conn, want []byte, rng *rand.Rand) error {
	buf := make([]byte, 2*RecordMax+1)
	off := 0
	for off < len(want) {
		var n int
		switch rng.IntN(4) {
		case 0:
			n = 1 + rng.IntN(100)
		case 1:
			n = RecordMax
		default:
			n = 1 + rng.IntN(len(buf))
		}
		m, err := c.Read(buf[:n])
		if off+m > len(want) || !bytes.Equal(buf[:m], want[off:off+m]) {
			return fmt.Errorf("bytes %d to %d differ", off, off+m)
		}
		off += m
		if err != nil {
			return fmt.Errorf("Read at %d: %v", off, err)
		}
	}
	return nil
}

// TestDeadline: an expired read deadline breaks reading with the
// connection's timeout error, for good; the write side is untouched.
func TestDeadline(t *testing.T) {
	leaktest.Check(t)
	cli, srv := sealPair(t, "d", "d", true, false)
	defer cli.Close()
	defer srv.Close()
	if err := srv.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := srv.Read(make([]byte, 8))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read: %v, want a timeout", err)
	}
	srv.SetReadDeadline(time.Time{})
	if _, err2 := srv.Read(make([]byte, 8)); err2 != err {
		t.Fatalf("Read after the timeout: %v, want %v", err2, err)
	}
	if _, err := srv.Write([]byte("still writes")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Flush(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("still writes"))
	if _, err := io.ReadFull(cli, got); err != nil || string(got) != "still writes" {
		t.Fatalf("read %q, %v", got, err)
	}
	if cli.LocalAddr().String() != srv.RemoteAddr().String() {
		t.Fatalf("addresses %v, %v", cli.LocalAddr(), srv.RemoteAddr())
	}
}

// TestBuffersGrow: a link of small messages keeps its small buffers (one
// record out, rbufMin in); full records grow both to bufLen, and the
// bytes read across the growth are the bytes sent.
func TestBuffersGrow(t *testing.T) {
	kc, ks := keyPair(t, "s", "c")
	s := &sink{}
	w := New(s, nil, kc)
	var want []byte
	for i := range 50 {
		p := pattern(100+i, byte(i))
		want = append(want, p...)
		if _, err := w.Write(p); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if cap(w.wbuf) != recMax {
		t.Fatalf("after small messages the output buffer holds %d bytes, want %d", cap(w.wbuf), recMax)
	}
	big := pattern(3*RecordMax+7, 9)
	want = append(want, big...)
	if _, err := w.Write(big); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if cap(w.wbuf) != bufLen {
		t.Fatalf("after full records the output buffer holds %d bytes, want %d", cap(w.wbuf), bufLen)
	}
	r := New(nil, bytes.NewReader(s.buf), ks)
	got := make([]byte, len(want))
	smallLen := len(want) - len(big)
	if _, err := io.ReadFull(r, got[:smallLen]); err != nil {
		t.Fatal(err)
	}
	if len(r.rbuf) != rbufMin {
		t.Fatalf("the input buffer grew to %d bytes on small records", len(r.rbuf))
	}
	if _, err := io.ReadFull(r, got[smallLen:]); err != nil {
		t.Fatal(err)
	}
	if len(r.rbuf) != bufLen {
		t.Fatalf("after full records the input buffer holds %d bytes, want %d", len(r.rbuf), bufLen)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the bytes read are not the bytes sent")
	}
}
