package trace

import "testing"

var sink *Recorder

// BenchmarkEventOff is a call site with tracing and the flight recorder
// off: a nil recorder, one branch.
func BenchmarkEventOff(b *testing.B) {
	var r *Recorder = sink
	tr := Track{ProcWorker(0), ThreadCollectives}
	b.ReportAllocs()
	for b.Loop() {
		if r != nil {
			r.Record(&Event{Track: tr, Name: "allreduce", Cat: CatCollective, Phase: Begin})
		}
	}
}

// BenchmarkEventFlight is a worker's default: the flight recorder only
// (timestamp, ring slot and state slot), no trace file.
func BenchmarkEventFlight(b *testing.B) {
	r := NewRecorder(ProcWorker(0), NewHeapRing(DefaultRingSlots, 0), false)
	benchRecord(b, r)
}

// BenchmarkEventOn is tracing on: flight recorder plus the event kept.
func BenchmarkEventOn(b *testing.B) {
	r := NewRecorder(ProcWorker(0), NewHeapRing(DefaultRingSlots, 0), true)
	benchRecord(b, r)
}

// BenchmarkEventOnNoRing is tracing on without a flight recorder (GPU
// and fault events, the controller).
func BenchmarkEventOnNoRing(b *testing.B) {
	r := NewRecorder(ProcWorker(0), nil, true)
	benchRecord(b, r)
}

func benchRecord(b *testing.B, r *Recorder) {
	tr := r.Track(ThreadCollectives)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		e := Event{Track: tr, Name: "allreduce", Cat: CatCollective, Phase: Begin, Args: Args{Bytes: 4 << 20, Seq: uint64(i), Comm: "global", Backend: "cpu", Op: "sum", Rank: 1, Set: HasRank}}
		r.Record(&e)
		if i%(1<<20) == 0 {
			_ = r.Drain(func([]Event) error { return nil }) // bound memory on long runs
		}
	}
}

// BenchmarkEventFlightSite is a worker's default through a Site (what
// worker command and collective spans use).
func BenchmarkEventFlightSite(b *testing.B) {
	r := NewRecorder(ProcWorker(0), NewHeapRing(DefaultRingSlots, 0), false)
	s := r.NewSite(r.Track(ThreadCollectives), "allreduce", CatCollective, Args{Rank: 1, Set: HasRank, Comm: "global", Backend: "cpu", Op: "sum"})
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		i++
		s.Mark(Begin, 0, i, 4<<20, "")
	}
}
