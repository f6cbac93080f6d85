package worker

import (
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/runtime/trace"
)

// GPU work in the trace: when the timeline is on and the worker's device
// can time its own work (device.Timer: CUDA events on a GPU, the host
// clock on the Fake), the worker marks the stream before and after each
// piece of device work it issues (host<->device copies, the custom
// all-reduce, collectives of GPU backends) and turns the marks into X
// events on "worker N gpu / stream 0" when it next synchronizes the
// device (Sync, Ping) or closes. Device time between marks is exact;
// where the stream's timeline sits against the host's is anchored at the
// host time of the first mark after each resolution (the stream may have
// started that work later, if it was busy). Code outside this package
// that issues device work (compiler/vm's kernels, plan executors) times
// it with BeginGPU (registry.BeginGPU). Spans do not nest: a mark pair opened inside another
// (the custom all-reduce inside a VM instruction) is skipped, and the
// outer one names the work. Not covered: work inside a CUDA graph capture
// (marks are not allowed there).

// gpuMarks bounds the marks between two resolutions; a full stopwatch is
// resolved early (which waits for the device).
const gpuMarks = 512

type gpuOp struct {
	name  string
	bytes int64
}

type gpuTimer struct {
	sw     device.Stopwatch
	ops    []gpuOp
	anchor int64 // host trace time of the first mark since the last resolution
	track  trace.Track
	open   bool // a begin mark without its end: inner spans are skipped
}

// gpuBegin marks the stream before device work; it returns false when
// the work is not timed (timeline off, no timer, capturing, a failure).
func (w *Worker) gpuBegin() bool {
	if !w.rec.Timeline() || w.dev == nil {
		return false
	}
	if c, ok := w.dev.(device.Capturer); ok && c.Capturing() {
		return false
	}
	g := w.gpu
	if g != nil && g.open {
		return false
	}
	if g == nil {
		tm, ok := w.dev.(device.Timer)
		if !ok {
			return false
		}
		sw, err := tm.NewStopwatch(gpuMarks)
		if err != nil {
			return false
		}
		g = &gpuTimer{sw: sw, track: trace.Track{Process: trace.ProcWorkerGPU(w.cfg.ID), Thread: trace.StreamThread(0)}}
		w.gpu = g
	}
	if 2*len(g.ops)+2 > gpuMarks {
		w.gpuResolve()
	}
	if len(g.ops) == 0 {
		g.anchor = trace.Now()
	}
	g.open = g.sw.Mark() == nil
	return g.open
}

// gpuEnd marks the stream after the work gpuBegin (true) marked before.
func (w *Worker) gpuEnd(began bool, name string, bytes int64) {
	if !began {
		return
	}
	w.gpu.open = false
	if w.gpu.sw.Mark() != nil {
		// The pair is broken: the laps would no longer line up.
		w.gpu.sw.Laps()
		w.gpu.ops = w.gpu.ops[:0]
		return
	}
	w.gpu.ops = append(w.gpu.ops, gpuOp{name, bytes})
}

// gpuResolve waits for the marks and records the timed work.
func (w *Worker) gpuResolve() {
	g := w.gpu
	if g == nil || len(g.ops) == 0 {
		return
	}
	laps, err := g.sw.Laps()
	ops := g.ops
	g.ops = g.ops[:0]
	if err != nil || len(laps) != 2*len(ops)-1 {
		return
	}
	at := g.anchor
	for i, op := range ops {
		d := int64(laps[2*i])
		w.rec.Record(&trace.Event{Track: g.track, Name: op.name, Cat: trace.CatGPU, Phase: trace.Complete, TS: at, Dur: d, Args: trace.Args{Bytes: op.bytes}})
		at += d
		if 2*i+1 < len(laps) {
			at += int64(laps[2*i+1])
		}
	}
}

func (w *Worker) closeGPUTimer() {
	if w.gpu != nil {
		w.gpuResolve()
		w.gpu.sw.Close()
		w.gpu = nil
	}
}
