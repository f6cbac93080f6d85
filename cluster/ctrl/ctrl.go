package ctrl

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Version of the control protocol; a Hello of another version is refused.
const Version = 1

// Type is a frame's kind.
type Type uint8

const (
	THello     Type = 1 // agent -> controller: Hello
	TAssign    Type = 2 // controller -> agent: Assign
	TReady     Type = 3 // agent -> controller: Ready
	TWire      Type = 4 // either way: one wire frame (command or reply)
	THeartbeat Type = 5 // either way: empty
	TLost      Type = 6 // agent -> controller: Lost (a local worker died)
	TAbort     Type = 7 // controller -> agent: Abort (a peer host was lost)
	TDone      Type = 8 // agent -> controller: Done (workers stopped)
	TRefuse    Type = 9 // either way: Refuse (why the peer gives up)
	// Tracing (only when Assign.Trace; see docs/observability.md).
	TPing     Type = 10 // controller -> agent: the controller's clock (8 bytes, Clock)
	TPong     Type = 11 // agent -> controller: the ping's clock and the agent's (16 bytes, Clock)
	TTrace    Type = 12 // agent -> controller: trace events as part lines (runtime/trace)
	TTraceEnd Type = 13 // agent -> controller: TraceEnd (its events are complete)
)

// MaxMessage bounds every frame but TWire.
const MaxMessage = 64 << 10

// MaxWire bounds TWire frames (transport.MaxFrame).
const MaxWire = 1<<30 + 1<<20

// MaxTrace bounds TTrace frames: an agent sends its events in pieces.
const MaxTrace = 1 << 20

// ErrMalformed: a frame broke the protocol.
var ErrMalformed = errors.New("ctrl: malformed frame")

func (t Type) limit() int {
	switch t {
	case TWire:
		return MaxWire
	case THeartbeat:
		return 0
	case THello, TAssign, TReady, TLost, TAbort, TDone, TRefuse, TTraceEnd:
		return MaxMessage
	case TPing:
		return 8
	case TPong:
		return 16
	case TTrace:
		return MaxTrace
	}
	return -1
}

func (t Type) String() string {
	names := [...]string{"?", "hello", "assign", "ready", "wire", "heartbeat", "lost", "abort", "done", "refuse", "ping", "pong", "trace", "trace-end"}
	if int(t) < len(names) {
		return names[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Hello introduces an agent.
type Hello struct {
	Version  int    `json:"version"`
	NodeRank int    `json:"node_rank"` // -1: any
	Workers  int    `json:"workers"`
	Hostname string `json:"hostname"`
	PID      int    `json:"pid"`
}

// Assign gives an agent its place in the session.
type Assign struct {
	NodeRank    int    `json:"node_rank"`
	Nodes       int    `json:"nodes"`
	Base        int    `json:"base"`
	Total       int    `json:"total"`
	Groups      int    `json:"groups"`
	DeviceIDs   []int  `json:"device_ids"`
	Transport   string `json:"transport"`
	HeartbeatMs int64  `json:"heartbeat_ms"`
	DeadlineMs  int64  `json:"deadline_ms"`
	GraceMs     int64  `json:"grace_ms"`
	// Addr is the agent's address as the controller sees it; workers bind
	// their data listeners to it.
	Addr string `json:"addr"`
	// Trace: the session traces. The agent's workers record their
	// events, the agent answers TPing with TPong, and before it confirms
	// that its workers stopped (or when its controller goes) it sends
	// them as TTrace frames and a TTraceEnd, at most TraceBytes of them.
	Trace      bool  `json:"trace,omitempty"`
	TraceBytes int64 `json:"trace_bytes,omitempty"`
	// Worker are the controller's settings of every worker (its
	// session's worker.Options, less the data endpoint, which each agent
	// sets); the agent sends them to its workers in their spec.
	Worker WorkerSettings `json:"worker,omitzero"`
}

// WorkerSettings are worker.Options as the controller sends them.
type WorkerSettings struct {
	FakeGPU         bool   `json:"fake_gpu,omitempty"`
	CPUProfile      string `json:"cpu_profile,omitempty"`
	IPCAutoTable    string `json:"ipc_auto_table,omitempty"`
	SkipChecks      bool   `json:"skip_checks,omitempty"`
	NoSharedTensors bool   `json:"no_shared_tensors,omitempty"`
	// CPU are the cpu backend's options, cpu.Options in JSON (every
	// host's workers get the controller's, so they agree); empty: the
	// defaults.
	CPU json.RawMessage `json:"cpu,omitempty"`
}

// Ready says the agent's workers started.
type Ready struct {
	PIDs []int `json:"pids"`
}

// Lost reports a local worker that died.
type Lost struct {
	Worker int    `json:"worker"`
	PID    int    `json:"pid"`
	Status string `json:"status"`
}

// Abort tells an agent that a peer was lost.
type Abort struct {
	Reason string `json:"reason"`
}

// Done reports how the agent's workers stopped.
type Done struct {
	Error string `json:"error"`
}

// TraceEnd ends an agent's trace events.
type TraceEnd struct {
	Events  int64 `json:"events"`  // sent in TTrace frames
	Dropped int64 `json:"dropped"` // the oldest, left out to stay within Assign.TraceBytes
	// Error says what could not be collected (a part file unreadable).
	Error string `json:"error,omitempty"`
}

// PingPayload is a TPing's payload: the controller's clock (ns).
func PingPayload(t int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(t)) }

// PongPayload answers the TPing payload ping (echoed) with the agent's
// clock at its arrival.
func PongPayload(ping []byte, t int64) ([]byte, error) {
	if len(ping) != 8 {
		return nil, fmt.Errorf("%w: ping of %d bytes, want 8", ErrMalformed, len(ping))
	}
	return binary.LittleEndian.AppendUint64(append([]byte(nil), ping...), uint64(t)), nil
}

// ParsePong returns the controller's clock a TPong echoes and the
// agent's clock in it.
func ParsePong(p []byte) (sent, remote int64, err error) {
	if len(p) != 16 {
		return 0, 0, fmt.Errorf("%w: pong of %d bytes, want 16", ErrMalformed, len(p))
	}
	return int64(binary.LittleEndian.Uint64(p)), int64(binary.LittleEndian.Uint64(p[8:])), nil
}

// Refuse says why the sender gives up.
type Refuse struct {
	Reason string `json:"reason"`
}

// Decode decodes a JSON message strictly into v.
func Decode(t Type, payload []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(payload))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrMalformed, t, err)
	}
	if d.More() {
		return fmt.Errorf("%w: %s: trailing data", ErrMalformed, t)
	}
	return nil
}

// Conn is one control connection. One goroutine reads; any goroutine
// writes (writes are serialized).
type Conn struct {
	c    net.Conn
	idle time.Duration
	r    *bufio.Reader
	buf  []byte
	wmu  sync.Mutex
	w    *bufio.Writer
}

// idleReader extends the read deadline before every read, so a frame of
// any size may take long as long as bytes keep coming.
type idleReader struct {
	c    net.Conn
	idle time.Duration
}

func (r idleReader) Read(p []byte) (int, error) {
	if r.idle > 0 {
		_ = r.c.SetReadDeadline(time.Now().Add(r.idle))
	}
	return r.c.Read(p)
}

// idleWriter is idleReader for writes.
type idleWriter idleReader

func (w idleWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if w.idle > 0 {
			_ = w.c.SetWriteDeadline(time.Now().Add(w.idle))
		}
		// Write in pieces so a large frame to a slow but live peer does
		// not trip the deadline.
		k, err := w.c.Write(p[n:min(len(p), n+4<<20)])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// NewConn wraps c; idle > 0 is the deadline for any progress in either
// direction.
func NewConn(c net.Conn, idle time.Duration) *Conn {
	return &Conn{c: c, idle: idle, r: bufio.NewReaderSize(idleReader{c, idle}, 64<<10), w: bufio.NewWriterSize(idleWriter{c, idle}, 64<<10)}
}

// SetIdle changes the deadline (before the reader starts).
func (c *Conn) SetIdle(d time.Duration) {
	c.idle = d
	c.r = bufio.NewReaderSize(idleReader{c.c, d}, 64<<10)
	c.w = bufio.NewWriterSize(idleWriter{c.c, d}, 64<<10)
}

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.c.RemoteAddr() }

// LocalAddr is our address.
func (c *Conn) LocalAddr() net.Addr { return c.c.LocalAddr() }

// Read returns the next frame; the payload is valid until the next Read.
func (c *Conn) Read() (Type, []byte, error) {
	return ReadFrame(c.r, &c.buf)
}

// ReadFrame reads one frame from r into *buf.
func ReadFrame(r io.Reader, buf *[]byte) (Type, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.LittleEndian.Uint32(h[:4]))
	t := Type(h[4])
	lim := t.limit()
	if lim < 0 {
		return 0, nil, fmt.Errorf("%w: unknown type %d", ErrMalformed, h[4])
	}
	if n > lim {
		return 0, nil, fmt.Errorf("%w: %s of %d bytes, at most %d", ErrMalformed, t, n, lim)
	}
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	p := (*buf)[:n]
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return t, p, nil
}

// Write sends one frame and flushes it.
func (c *Conn) Write(t Type, payload []byte) error {
	if lim := t.limit(); lim < 0 || len(payload) > lim {
		return fmt.Errorf("ctrl: %s frame of %d bytes not allowed", t, len(payload))
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var h [5]byte
	binary.LittleEndian.PutUint32(h[:4], uint32(len(payload)))
	h[4] = byte(t)
	if _, err := c.w.Write(h[:]); err != nil {
		return err
	}
	if _, err := c.w.Write(payload); err != nil {
		return err
	}
	return c.w.Flush()
}

// WriteJSON sends a JSON message.
func (c *Conn) WriteJSON(t Type, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.Write(t, b)
}

// Close closes the connection. A TLS connection's close_notify gets a
// short deadline, so closing never waits on a peer that does not read.
func (c *Conn) Close() error {
	_ = c.c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	return c.c.Close()
}

// CloseWrite ends our direction (TLS close_notify) within d and keeps
// reading possible, so that frames already sent reach a peer that is
// still reading: closing a socket with unread input resets it, and the
// peer's kernel may then drop frames it had not delivered yet.
func (c *Conn) CloseWrite(d time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.c.SetWriteDeadline(time.Now().Add(d))
	if cw, ok := c.c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Drain reads and discards frames until the peer closes or d passes.
func (c *Conn) Drain(d time.Duration) {
	_ = c.c.SetReadDeadline(time.Now().Add(d))
	var buf [4096]byte
	for {
		if _, err := c.c.Read(buf[:]); err != nil {
			return
		}
	}
}
