package trace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"unsafe"

	"github.com/chorus-rt/chorus/internal/sys/tsc"
)

// The flight recorder's memory layout: a header, one state slot per
// thread (the command and the collective in progress, or the last one
// that ended), and a ring of the most recent events. Every word is
// accessed atomically; a slot is guarded by its own sequence word (odd
// while it is being written), so a reader in another process copies
// consistent slots without the writer's help, even when the writer is
// frozen (SIGSTOP) or dead.
const (
	ringMagic   = 0x4c46_5355_524f_4843 // "CHORUSFL"
	ringVersion = 1

	slotWords = 16 // 128 bytes
	slotBytes = slotWords * 8
	hdrWords  = 16
	nameBytes = 48 // words 6..11
	textBytes = 32 // words 12..15: backend, then op
	numStates = 2  // commands, collectives

	// header words
	hMagic   = 0
	hVersion = 1
	hSlots   = 2
	hWorker  = 3
	hPID     = 4
	hHead    = 5 // events written, ever
)

// DefaultRingSlots is the flight recorder's size in events.
const DefaultRingSlots = 64

// RingSize is the number of bytes a ring of slots events occupies.
func RingSize(slots int) int { return (hdrWords + (numStates+slots)*slotWords) * 8 }

// ErrRing: memory that does not hold a flight recorder.
var ErrRing = errors.New("trace: not a flight recorder")

// Ring is a worker's flight recorder. One goroutine writes (Put); any
// number read (Snapshot), in this process or another that maps the same
// memory.
type Ring struct {
	w     []uint64
	slots int
	// last holds, per slot, the strings whose bytes its text words hold
	// (writer side): an event with the same strings, nearly every event
	// of a loop, skips packing them again (a third of an event's cost).
	// The pointers keep the strings alive, so an address cannot be
	// reused for other bytes.
	last []textKey
	// clock is the writer's clock (Now's, read through the TSC:
	// internal/sys/tsc), written on every event. The pads keep it off the
	// cache lines of neighbouring heap objects: small objects share
	// lines, and the Rings of workers on other cores are allocated
	// together (a shared line cost 8 threaded workers 0.3 us a round
	// on the 16-core host).
	_     [64]byte
	clock tsc.Clock
	_     [64]byte
}

type textKey struct {
	name, backend, op *byte
	nl, bl, ol        int
}

// eq compares field by field (== on the struct calls memequal).
func (a *textKey) eq(b textKey) bool {
	return a.name == b.name && a.backend == b.backend && a.op == b.op && a.nl == b.nl && a.bl == b.bl && a.ol == b.ol
}

// NewRing formats mem (8-byte aligned, at least RingSize(slots) bytes,
// zeroed) as a ring of slots events for worker.
func NewRing(mem []byte, slots, worker int) (*Ring, error) {
	if slots < 1 || len(mem) < RingSize(slots) || uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%8 != 0 {
		return nil, fmt.Errorf("trace: ring of %d slots needs %d aligned bytes, have %d", slots, RingSize(slots), len(mem))
	}
	r := &Ring{w: words(mem), slots: slots, last: textCache(slots), clock: tsc.New(Now)}
	atomic.StoreUint64(&r.w[hVersion], ringVersion)
	atomic.StoreUint64(&r.w[hSlots], uint64(slots))
	atomic.StoreUint64(&r.w[hWorker], uint64(worker))
	atomic.StoreUint64(&r.w[hMagic], ringMagic)
	return r, nil
}

// NewHeapRing is a ring in ordinary memory (threaded sessions).
func NewHeapRing(slots, worker int) *Ring {
	mem := make([]uint64, RingSize(slots)/8)
	r, err := NewRing(unsafe.Slice((*byte)(unsafe.Pointer(&mem[0])), len(mem)*8), slots, worker)
	if err != nil {
		panic(err) // sizes are ours
	}
	return r
}

// AttachRing uses a ring that NewRing formatted (in another process).
func AttachRing(mem []byte) (*Ring, error) {
	if len(mem) < RingSize(1) || uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%8 != 0 {
		return nil, fmt.Errorf("%w: %d bytes", ErrRing, len(mem))
	}
	w := words(mem)
	if atomic.LoadUint64(&w[hMagic]) != ringMagic || atomic.LoadUint64(&w[hVersion]) != ringVersion {
		return nil, fmt.Errorf("%w: bad magic or version", ErrRing)
	}
	slots := atomic.LoadUint64(&w[hSlots])
	if slots < 1 || slots > uint64(len(mem)) || RingSize(int(slots)) > len(mem) {
		return nil, fmt.Errorf("%w: %d slots do not fit %d bytes", ErrRing, slots, len(mem))
	}
	// The attaching process may be the ring's writer (a worker attaches
	// the ring its controller made): it gets the text cache too, which
	// without this a worker process never had (each event packed its
	// strings again: about 100 ns of a collective's begin and end).
	return &Ring{w: w, slots: int(slots), last: textCache(int(slots)), clock: tsc.New(Now)}, nil
}

// textCache is a Ring's last for slots events: every entry matches no
// event, so each slot's first write packs its strings whatever the
// memory held before (a ring attached after another writer).
func textCache(slots int) []textKey {
	last := make([]textKey, numStates+slots)
	for i := range last {
		last[i].nl = -1
	}
	return last
}

func words(mem []byte) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(mem))), len(mem)/8)
}

// Now is the time for an event of this ring's writer: Now's clock, read
// through the TSC where tsc.Enabled (internal/sys/tsc). Only the ring's
// writer may call it.
func (r *Ring) Now() int64 { return r.clock.Now() }

// SetPID records the writer's process id (for reports).
func (r *Ring) SetPID(pid int) { atomic.StoreUint64(&r.w[hPID], uint64(pid)) }

// PID is the writer's process id (0 if not set).
func (r *Ring) PID() int { return int(atomic.LoadUint64(&r.w[hPID])) }

// Worker is the worker id the ring was made for.
func (r *Ring) Worker() int { return int(atomic.LoadUint64(&r.w[hWorker])) }

// Written is the number of events ever put.
func (r *Ring) Written() uint64 { return atomic.LoadUint64(&r.w[hHead]) }

func (r *Ring) slot(i int) []uint64 {
	off := hdrWords + i*slotWords
	return r.w[off : off+slotWords : off+slotWords]
}

// stateIndex is the state slot of thread's events: -1 for activities,
// which live in the history alone (Snapshot.Activity).
func stateIndex(thread string) int {
	switch thread {
	case ThreadCollectives:
		return 1
	case ThreadActivity:
		return -1
	}
	return 0
}

// ringCat reports whether events of category cat go to the flight
// recorder.
func ringCat(cat string) bool { return cat == CatCommand || cat == CatCollective || cat == CatActivity }

// Put records e (its process is the ring's worker) in the history and in
// its thread's state slot: a timestamp is already in e, the rest is a few
// stores. Names longer than 48 bytes and backend plus op longer than 32
// bytes are cut.
func (r *Ring) Put(e *Event) {
	// One writer: a plain increment (a locked add would drain the store
	// buffer, which may hold the reply just sent to another core).
	i := atomic.LoadUint64(&r.w[hHead])
	storeSeq(&r.w[hHead], i+1)
	r.store(numStates+int(i%uint64(r.slots)), e)
	if st := stateIndex(e.Track.Thread); st >= 0 {
		r.store(st, e)
	}
}

func (r *Ring) store(idx int, e *Event) {
	s := r.slot(idx)
	seq := atomic.LoadUint64(&s[0])
	storeSeq(&s[0], seq|1) // odd: being written
	ec := uint64(0)
	if e.Args.Error != "" {
		ec = 1
	}
	storeWord(&s[1], uint64(e.TS))
	storeWord(&s[2], slotMeta(e, ec))
	storeWord(&s[3], uint64(e.Args.Bytes))
	storeWord(&s[4], e.Args.Seq)
	storeWord(&s[5], uint64(uint32(e.Args.Rank))|uint64(e.Args.Set)<<32)
	if k := keyOf(e); idx >= len(r.last) || !r.last[idx].eq(k) {
		putText(s[6:12], e.Name, "")
		putText(s[12:16], e.Args.Backend, e.Args.Op)
		if idx < len(r.last) {
			r.last[idx] = k
		}
	}
	storeSeq(&s[0], (seq|1)+1) // even: complete
}

// slotMeta is a slot's word 2 for e, failed if ec is 1.
func slotMeta(e *Event, ec uint64) uint64 {
	var cat uint64
	switch e.Cat {
	case CatCommand:
		cat = 1
	case CatCollective:
		cat = 2
	case CatActivity:
		cat = 3
	}
	thread := uint64(0)
	switch e.Track.Thread {
	case ThreadCollectives:
		thread = 1
	case ThreadActivity:
		thread = 2
	}
	return uint64(e.Phase) | cat<<8 | thread<<16 | ec<<24 |
		uint64(min(len(e.Name), nameBytes))<<32 | uint64(min(len(e.Args.Backend), textBytes))<<40 |
		uint64(min(len(e.Args.Op), textBytes-min(len(e.Args.Backend), textBytes)))<<48
}

// keyOf identifies the strings whose bytes a slot's text words hold.
func keyOf(e *Event) textKey {
	return textKey{unsafe.StringData(e.Name), unsafe.StringData(e.Args.Backend), unsafe.StringData(e.Args.Op), len(e.Name), len(e.Args.Backend), len(e.Args.Op)}
}

// putSite is Put for an event of span sp (Site.Mark): the same slots
// and words, from what the Site computed when it was made.
func (r *Ring) putSite(sp *Site, ph Phase, ts int64, seq uint64, bytes int64, failed bool) {
	i := atomic.LoadUint64(&r.w[hHead])
	storeSeq(&r.w[hHead], i+1)
	meta := sp.meta | uint64(ph)
	if failed {
		meta |= 1 << 24
	}
	r.storeSite(numStates+int(i%uint64(r.slots)), sp, meta, ts, seq, bytes)
	if sp.state >= 0 {
		r.storeSite(sp.state, sp, meta, ts, seq, bytes)
	}
}

func (r *Ring) storeSite(idx int, sp *Site, meta uint64, ts int64, seq uint64, bytes int64) {
	s := r.slot(idx)
	q := atomic.LoadUint64(&s[0])
	storeSeq(&s[0], q|1)
	storeWord(&s[1], uint64(ts))
	storeWord(&s[2], meta)
	storeWord(&s[3], uint64(bytes))
	storeWord(&s[4], seq)
	storeWord(&s[5], uint64(uint32(sp.ev.Args.Rank))|uint64(sp.ev.Args.Set)<<32)
	if !r.last[idx].eq(sp.key) {
		for j, v := range sp.text {
			storeWord(&s[6+j], v)
		}
		r.last[idx] = sp.key
	}
	storeSeq(&s[0], (q|1)+1)
}

// MarkEnded turns the state slot of thread, which holds the begin of the
// span in progress, into its end at ts (failed: with an error), without
// a history entry. It is a few stores: a writer that records the full end
// later, off a latency-critical path (a worker replies first), calls it
// first, so that a reader never sees a span in progress that has ended.
// Activities have no state slot: nothing to mark.
func (r *Ring) MarkEnded(thread string, ts int64, failed bool) {
	st := stateIndex(thread)
	if st < 0 {
		return
	}
	s := r.slot(st)
	seq := atomic.LoadUint64(&s[0])
	meta := atomic.LoadUint64(&s[2])
	if seq == 0 || Phase(meta&0xff) != Begin {
		return // nothing in progress
	}
	storeSeq(&s[0], seq|1)
	meta = meta&^0xff | uint64(End)
	if failed {
		meta |= 1 << 24
	}
	storeWord(&s[1], uint64(ts))
	storeWord(&s[2], meta)
	storeSeq(&s[0], (seq|1)+1)
}

// putText packs a, then b, into words, cut to fit.
func putText(w []uint64, a, b string) {
	var buf [nameBytes]byte
	n := copy(buf[:len(w)*8], a)
	copy(buf[n:len(w)*8], b)
	for i := range w {
		storeWord(&w[i], binary.LittleEndian.Uint64(buf[i*8:]))
	}
}

// read copies slot s consistently: ok is false for a slot never written
// or one that kept changing under the reader.
func (r *Ring) read(s []uint64) (e Event, ok bool) {
	var c [slotWords]uint64
	for range 8 {
		a := atomic.LoadUint64(&s[0])
		if a == 0 {
			return e, false
		}
		if a&1 != 0 {
			continue
		}
		for i := 1; i < slotWords; i++ {
			c[i] = atomic.LoadUint64(&s[i])
		}
		if atomic.LoadUint64(&s[0]) == a {
			return decodeSlot(&c, r.Worker()), true
		}
	}
	return e, false
}

func decodeSlot(c *[slotWords]uint64, worker int) Event {
	meta := c[2]
	var buf [nameBytes]byte
	for i := range 6 {
		binary.LittleEndian.PutUint64(buf[i*8:], c[6+i])
	}
	nl := min(int(meta>>32&0xff), nameBytes)
	name := string(buf[:nl])
	for i := range 4 {
		binary.LittleEndian.PutUint64(buf[i*8:], c[12+i])
	}
	bl := min(int(meta>>40&0xff), textBytes)
	ol := min(int(meta>>48&0xff), textBytes-bl)
	e := Event{
		Track: Track{Process: ProcWorker(worker), Thread: ThreadCommands},
		Name:  name, Phase: Phase(meta & 0xff), TS: int64(c[1]),
		Args: Args{Bytes: int64(c[3]), Seq: c[4], Rank: int32(uint32(c[5])), Set: uint8(c[5] >> 32),
			Backend: string(buf[:bl]), Op: string(buf[bl : bl+ol])},
	}
	switch meta >> 8 & 0xff {
	case 1:
		e.Cat = CatCommand
	case 2:
		e.Cat = CatCollective
	case 3:
		e.Cat = CatActivity
	}
	switch meta >> 16 & 0xff {
	case 1:
		e.Track.Thread = ThreadCollectives
	case 2:
		e.Track.Thread = ThreadActivity
	}
	if meta>>24&0xff != 0 {
		e.Args.Error = "failed"
	}
	return e
}

// Snapshot is what a flight recorder holds at one moment.
type Snapshot struct {
	Worker int
	PID    int
	// Command and Collective are the latest event of each thread: a
	// Begin means that span is still running (since its TS), an End that
	// the thread is idle since TS. Zero Phase: nothing yet.
	Command, Collective Event
	// Activity is the latest activity event among Recent (a Begin: long
	// work inside the command in progress, such as a kernel compile).
	Activity Event
	// Recent are the latest events, oldest first (at most the ring's
	// size; slots being written at the moment of reading are left out).
	Recent []Event
}

// Snapshot reads the ring. It never waits for the writer.
func (r *Ring) Snapshot() Snapshot {
	s := Snapshot{Worker: r.Worker(), PID: r.PID()}
	s.Command, _ = r.read(r.slot(0))
	s.Collective, _ = r.read(r.slot(1))
	head := r.Written()
	n := min(head, uint64(r.slots))
	for i := head - n; i < head; i++ {
		if e, ok := r.read(r.slot(numStates + int(i%uint64(r.slots)))); ok {
			s.Recent = append(s.Recent, e)
		}
	}
	// A slot overwritten while the ring was read holds a newer event.
	sort.SliceStable(s.Recent, func(i, j int) bool { return s.Recent[i].TS < s.Recent[j].TS })
	for i := len(s.Recent) - 1; i >= 0; i-- {
		if s.Recent[i].Track.Thread == ThreadActivity {
			s.Activity = s.Recent[i]
			break
		}
	}
	return s
}
