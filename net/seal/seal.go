package seal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// RecordMax is the most plaintext bytes in one record.
const RecordMax = 256 << 10

// Overhead is what one record adds on the wire: its header and the
// AES-GCM tag.
const Overhead = 4 + 16

const (
	hdrLen = 4  // big-endian length of the sealed body
	tagLen = 16 // AES-GCM tag
	// bodyMax is the largest valid header value (sealed body length).
	bodyMax = RecordMax + tagLen
	// recMax is the most bytes of one record on the wire.
	recMax = hdrLen + bodyMax
	// rbufMin is the input buffer a link starts with, and recMax the
	// output buffer: a link of small messages keeps them; one that
	// carries full records grows both to bufLen.
	rbufMin = 64 << 10
	// bufLen is the size of the output and the input buffer: four full
	// records (1 MiB of plaintext) per system call.
	bufLen = 4 * recMax
	// maxEmptyReads bounds how often r may return 0, nil in a row.
	maxEmptyReads = 100
)

var (
	// ErrAuth: a record failed authentication (wrong key, tampered,
	// replayed, reordered or dropped record).
	ErrAuth = errors.New("seal: record failed authentication")
	// ErrFrame: a record header is out of range (checked before the body
	// is read).
	ErrFrame = errors.New("seal: bad record length")
)

// Conn is a net.Conn whose bytes travel as sealed records over another
// connection. One goroutine may Read while another Writes and Flushes;
// Read is not safe for concurrent use with Read, nor Write and Flush
// with each other. Close, deadlines and the addresses are the underlying
// connection's and safe from any goroutine.
type Conn struct {
	c net.Conn
	r io.Reader

	// Sending side (the writer's goroutine).
	send    dir
	wbuf    []byte // sealed records not sent yet; cap recMax, grown to bufLen
	pending int    // plaintext bytes of the open record at wbuf[len+hdrLen:]
	werr    error

	// Receiving side (the reader's goroutine).
	recv       dir
	rbuf       []byte // len rbufMin, grown to bufLen; rbuf[rpos:rend] read from r, not yet opened
	rpos, rend int
	dec        []byte // opened plaintext not yet returned (in rbuf)
	rerr       error
}

// New returns a Conn that writes sealed records to c and reads them from r
// (r == nil: from c). r lets the caller put bytes in front (what a
// buffered reader already held) or a polling reader. Close closes c.
// Buffers are allocated on first use, small, and grow to 1 MiB each way
// on a link that carries full records.
func New(c net.Conn, r io.Reader, k Keys) *Conn {
	if r == nil {
		r = c
	}
	cn := &Conn{c: c, r: r, send: newDir(k.send), recv: newDir(k.recv)}
	if !k.ok {
		cn.werr, cn.rerr = errNoKeys, errNoKeys
	}
	return cn
}

// Write seals p into records. Full records collect in the output buffer
// and leave, one system call per buffer, when it is full; a partial
// record waits for more bytes or Flush. A Write of at least RecordMax
// bytes seals straight from p (it first closes a pending partial record,
// so that a small header in front of a large payload costs one short
// record rather than a copy of the payload). After an error every later
// Write and Flush returns it.
func (c *Conn) Write(p []byte) (int, error) {
	if c.werr != nil {
		return 0, c.werr
	}
	if c.wbuf == nil {
		c.wbuf = make([]byte, 0, recMax)
	}
	n := 0
	for len(p) > 0 {
		if len(p) >= RecordMax {
			if c.pending > 0 {
				if err := c.sealPending(); err != nil {
					return n, err
				}
			}
			if err := c.seal(p[:RecordMax]); err != nil {
				return n, err
			}
			p, n = p[RecordMax:], n+RecordMax
			continue
		}
		// The room for a full record at wbuf's end is there: seal sends
		// the buffer once it lacks it.
		off := len(c.wbuf) + hdrLen + c.pending
		k := copy(c.wbuf[off:off+RecordMax-c.pending], p)
		c.pending += k
		p, n = p[k:], n+k
		if c.pending == RecordMax {
			if err := c.sealPending(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Flush seals the pending partial record and sends every sealed record
// not sent yet. With nothing pending it sends nothing and returns nil.
func (c *Conn) Flush() error {
	if c.werr != nil {
		return c.werr
	}
	if c.pending > 0 {
		if err := c.sealPending(); err != nil {
			return err
		}
	}
	if len(c.wbuf) > 0 {
		return c.sendBuf()
	}
	return nil
}

// sealPending seals the open record in place.
func (c *Conn) sealPending() error {
	start := len(c.wbuf) + hdrLen
	pt := c.wbuf[start : start+c.pending]
	c.pending = 0
	return c.seal(pt)
}

// seal appends pt as a record to wbuf (pt may be the open record at
// wbuf's end: AEAD.Seal then encrypts in place) and sends the buffer when
// there is no room for another full record.
func (c *Conn) seal(pt []byte) error {
	aead, nonce, _, err := c.send.next()
	if err != nil {
		c.werr = err
		return err
	}
	h := len(c.wbuf)
	out := c.wbuf[:h+hdrLen]
	binary.BigEndian.PutUint32(out[h:], uint32(len(pt)+tagLen))
	c.wbuf = aead.Seal(out, nonce[:], pt, out[h:h+hdrLen])
	if cap(c.wbuf)-len(c.wbuf) < recMax {
		full := len(c.wbuf) >= RecordMax
		if err := c.sendBuf(); err != nil {
			return err
		}
		if full && cap(c.wbuf) < bufLen {
			// A link of full records: fewer system calls per byte.
			c.wbuf = make([]byte, 0, min(2*cap(c.wbuf), bufLen))
		}
	}
	return nil
}

// sendBuf writes the sealed records with one Write of c.
func (c *Conn) sendBuf() error {
	_, err := c.c.Write(c.wbuf)
	c.wbuf = c.wbuf[:0]
	if err != nil {
		c.werr = err
	}
	return err
}

// Read returns plaintext of authenticated records only. It opens at most
// one record per call: straight into p when p holds its plaintext,
// otherwise in place in the input buffer, and returns the rest from
// there in later calls. io.EOF at a record boundary is io.EOF; an end
// inside a record is io.ErrUnexpectedEOF. After an error (ErrAuth,
// ErrFrame, io.EOF, io.ErrUnexpectedEOF or an error of the reader,
// deadlines included) every later Read returns it and reads nothing.
func (c *Conn) Read(p []byte) (int, error) {
	if len(c.dec) > 0 {
		n := copy(p, c.dec)
		c.dec = c.dec[n:]
		return n, nil
	}
	if c.rerr != nil {
		return 0, c.rerr
	}
	if len(p) == 0 {
		return 0, nil
	}
	if c.rbuf == nil {
		c.rbuf = make([]byte, rbufMin)
	}
	n, err := c.readRecord(p)
	if err != nil {
		c.rerr = err
		return 0, err
	}
	return n, nil
}

// readRecord reads and opens the next record.
func (c *Conn) readRecord(p []byte) (int, error) {
	if err := c.fill(hdrLen, true); err != nil {
		return 0, err
	}
	hdr := c.rbuf[c.rpos : c.rpos+hdrLen]
	l := int(binary.BigEndian.Uint32(hdr))
	if l <= tagLen || l > bodyMax {
		return 0, fmt.Errorf("%w: header says %d bytes, want %d to %d (record %d)", ErrFrame, l, tagLen+1, bodyMax, c.recv.seq)
	}
	if err := c.fill(hdrLen+l, false); err != nil {
		return 0, err
	}
	hdr = c.rbuf[c.rpos : c.rpos+hdrLen]
	body := c.rbuf[c.rpos+hdrLen : c.rpos+hdrLen+l]
	aead, nonce, s, err := c.recv.next()
	if err != nil {
		return 0, err
	}
	c.rpos += hdrLen + l
	if c.rpos == c.rend {
		c.rpos, c.rend = 0, 0
	}
	if len(p) >= l-tagLen {
		pt, err := aead.Open(p[:0], nonce[:], body, hdr)
		if err != nil {
			return 0, fmt.Errorf("%w (record %d)", ErrAuth, s)
		}
		return len(pt), nil
	}
	pt, err := aead.Open(body[:0], nonce[:], body, hdr)
	if err != nil {
		return 0, fmt.Errorf("%w (record %d)", ErrAuth, s)
	}
	n := copy(p, pt)
	c.dec = pt[n:]
	return n, nil
}

// fill reads from r until rbuf holds need bytes from rpos, moving the
// bytes held to the front first when need does not fit behind them. One
// Read of r may return more than need: those bytes stay for the next
// record. boundary says rpos is at a record boundary, where the end of
// the stream is io.EOF rather than io.ErrUnexpectedEOF.
func (c *Conn) fill(need int, boundary bool) error {
	if c.rend-c.rpos >= need {
		return nil
	}
	if c.rpos+need > len(c.rbuf) {
		b := c.rbuf
		if need > len(b) {
			b = make([]byte, bufLen) // a record larger than the buffer
		}
		c.rend = copy(b, c.rbuf[c.rpos:c.rend])
		c.rbuf, c.rpos = b, 0
	}
	empty := 0
	for c.rend-c.rpos < need {
		n, err := c.r.Read(c.rbuf[c.rend:])
		c.rend += n
		if c.rend-c.rpos >= need {
			// An error that comes with the last bytes needed returns
			// again from the next Read of r, if one is needed.
			return nil
		}
		switch {
		case err == io.EOF:
			if boundary && c.rend == c.rpos {
				return io.EOF
			}
			return io.ErrUnexpectedEOF
		case err != nil:
			return err
		case n == 0:
			if empty++; empty >= maxEmptyReads {
				return io.ErrNoProgress
			}
		default:
			empty = 0
		}
	}
	return nil
}

// Close closes the underlying connection. It does not flush: call Flush
// first (Close may come from another goroutine than the writer's).
func (c *Conn) Close() error { return c.c.Close() }

// LocalAddr is the underlying connection's.
func (c *Conn) LocalAddr() net.Addr { return c.c.LocalAddr() }

// RemoteAddr is the underlying connection's.
func (c *Conn) RemoteAddr() net.Addr { return c.c.RemoteAddr() }

// SetDeadline sets the underlying connection's deadlines. An expired
// deadline breaks the Conn for the direction it stops (see Read, Write).
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }

// SetReadDeadline sets the underlying connection's read deadline.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.c.SetReadDeadline(t) }

// SetWriteDeadline sets the underlying connection's write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.c.SetWriteDeadline(t) }

// The header and the tag are what Overhead counts.
var _ [Overhead - hdrLen - tagLen]struct{}
var _ [hdrLen + tagLen - Overhead]struct{}
