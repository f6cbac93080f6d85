package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// sample is a small trace of two workers and the controller: commands,
// one collective per worker (worker 1 arrives 3 ms late), a GPU copy and
// a fault.
func sample() []Event {
	const t0 = int64(1_700_000_000_000_000_000)
	ms := int64(time.Millisecond)
	ctl := Track{ProcController, ThreadCommands}
	var evs []Event
	evs = append(evs, Event{Track: ctl, Name: "CallPacked app.step", Cat: CatCommand, Phase: Complete, TS: t0, Dur: 1000, Args: Args{Op: "CallPacked", Seq: 3}})
	for w := range 2 {
		cmd := Track{ProcWorker(w), ThreadCommands}
		col := Track{ProcWorker(w), ThreadCollectives}
		arrive := t0 + ms + int64(w)*3*ms
		evs = append(evs,
			Event{Track: cmd, Name: "app.step", Cat: CatCommand, Phase: Begin, TS: t0 + ms/2, Args: Args{Op: "CallPacked", Seq: 3}},
			Event{Track: col, Name: "allreduce", Cat: CatCollective, Phase: Begin, TS: arrive, Args: Args{Bytes: 4 << 20, Seq: 1, Rank: int32(w), Set: HasRank, Comm: "global", Backend: "cpu", Op: "sum"}},
			Event{Track: col, Name: "allreduce", Cat: CatCollective, Phase: End, TS: t0 + 5*ms},
			Event{Track: cmd, Name: "app.step", Cat: CatCommand, Phase: End, TS: t0 + 6*ms},
			Event{Track: Track{ProcWorkerGPU(w), StreamThread(0)}, Name: "copy D2H", Cat: CatGPU, Phase: Complete, TS: t0 + 6*ms, Dur: 500, Args: Args{Bytes: 64}},
		)
	}
	evs = append(evs, Event{Track: Track{ProcController, ThreadFaults}, Name: "worker error", Cat: CatFault, Phase: Instant, TS: t0 + 7*ms, Args: Args{Error: "worker 1: boom \"quoted\"\n\x01"}})
	return evs
}

func TestWriteReadValidate(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, sample()); err != nil {
		t.Fatal(err)
	}
	f, err := Read(buf.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if err := Validate(f); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if len(f.Events) != len(sample()) {
		t.Fatalf("read %d events, wrote %d", len(f.Events), len(sample()))
	}
	// Every event comes back, with its track, times and arguments.
	want := map[string]int{}
	for _, e := range sample() {
		want[eventKey(e)]++
	}
	for _, e := range f.Events {
		if want[eventKey(e)] == 0 {
			t.Errorf("read an event that was not written: %+v", e)
		}
		want[eventKey(e)]--
	}
	for _, name := range []string{`"process_name"`, `"worker 1 gpu"`, `"controller"`, `"thread_name"`, `"collectives"`} {
		if !strings.Contains(buf.String(), name) {
			t.Errorf("file lacks %s", name)
		}
	}
}

func eventKey(e Event) string {
	var b bytes.Buffer
	_ = WritePart(&b, []Event{e})
	return b.String()
}

func TestValidateRejects(t *testing.T) {
	const t0 = 1_000_000_000
	tr := Track{ProcWorker(0), ThreadCommands}
	cases := []struct {
		name string
		evs  []Event
		want string
	}{
		{"unbalanced", []Event{{Track: tr, Name: "f", Phase: Begin, TS: t0}}, "never end"},
		{"end without begin", []Event{{Track: tr, Name: "f", Phase: End, TS: t0}}, "nothing open"},
		{"crossed", []Event{{Track: tr, Name: "a", Phase: Begin, TS: t0}, {Track: tr, Name: "b", Phase: Begin, TS: t0 + 1}, {Track: tr, Name: "a", Phase: End, TS: t0 + 2}, {Track: tr, Name: "b", Phase: End, TS: t0 + 3}}, `E "a" closes B "b"`},
		{"negative dur", []Event{{Track: tr, Name: "x", Phase: Complete, TS: t0, Dur: -5}}, "negative dur"},
		{"bad phase", []Event{{Track: tr, Name: "x", Phase: 'Q', TS: t0}}, "not used by chorus"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Write(&buf, c.evs); err != nil {
				t.Fatal(err)
			}
			f, err := Read(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			err = Validate(f)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate = %v, want %q", err, c.want)
			}
		})
	}
	// Problems only a hand-written file has.
	files := []struct{ name, data, want string }{
		{"time goes back", `{"traceEvents":[{"name":"process_name","ph":"M","pid":1,"args":{"name":"worker 0"}},{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"commands"}},
			{"name":"a","ph":"i","ts":5,"pid":1,"tid":1},{"name":"b","ph":"i","ts":4,"pid":1,"tid":1}]}`, "goes back"},
		{"two processes called worker 0", `{"traceEvents":[{"name":"process_name","ph":"M","pid":1,"args":{"name":"worker 0"}},{"name":"process_name","ph":"M","pid":2,"args":{"name":"worker 0"}}]}`, `"worker 0" used by pids 1 and 2`},
		{"unnamed", `[{"name":"a","ph":"i","ts":5,"pid":7,"tid":1}]`, "pid 7 has no process_name"},
	}
	for _, c := range files {
		t.Run(c.name, func(t *testing.T) {
			f, err := Read([]byte(c.data))
			if err != nil {
				t.Fatal(err)
			}
			if err := Validate(f); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate = %v, want %q", err, c.want)
			}
		})
	}
	for _, bad := range []string{``, `{}`, `{"traceEvents":[{"ph":"B","ts":1}]}`, `{"traceEvents":[{"ph":"XY","pid":1,"ts":1}]}`, `{"traceEvents":[{"ph":"B","pid":1}]}`, `[{"ph":"B","pid":1,"ts":1e300}]`} {
		if _, err := Read([]byte(bad)); !errors.Is(err, ErrFormat) {
			t.Errorf("Read(%q) = %v, want ErrFormat", bad, err)
		}
	}
}

func TestSummaryStraggler(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, sample()); err != nil {
		t.Fatal(err)
	}
	f, err := Read(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(f)
	if len(s.Collectives) != 1 {
		t.Fatalf("matched %d collectives, want 1: %+v", len(s.Collectives), s.Collectives)
	}
	c := s.Collectives[0]
	if c.Slowest != 1 || c.Late != 3*time.Millisecond || c.Ranks != 2 || c.Backend != "cpu" || c.Bytes != 4<<20 {
		t.Fatalf("straggler %+v, want worker 1 late by 3ms over 2 ranks (cpu, 4 MiB)", c)
	}
	var ar *OpStat
	for i := range s.Ops {
		if s.Ops[i].Name == "allreduce" {
			ar = &s.Ops[i]
		}
	}
	if ar == nil || ar.Count != 2 || ar.Total != 4*time.Millisecond+time.Millisecond || ar.Side != "workers" {
		t.Fatalf("allreduce totals %+v, want 2 spans of 4 ms and 1 ms", ar)
	}
	var out bytes.Buffer
	if err := s.Print(&out, 10); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"allreduce", "worker 1", "3ms", "worker error", "copy D2H"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	sp := Spans(f)
	if len(sp) != len(sample())-4 { // 4 B/E pairs become 4 spans
		t.Fatalf("%d spans, want %d", len(sp), len(sample())-4)
	}
	for i := 1; i < len(sp); i++ {
		if sp[i].Start < sp[i-1].Start {
			t.Fatal("spans not ordered by start")
		}
	}
}

func TestPartAndClose(t *testing.T) {
	evs := sample()
	var buf bytes.Buffer
	if err := WritePart(&buf, evs); err != nil {
		t.Fatal(err)
	}
	// A worker killed mid-write leaves half a line: ignored.
	buf.WriteString(`{"p":"worker 0","t":"comm`)
	got, err := ReadPart(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("read %d events, want %d", len(got), len(evs))
	}
	for i := range evs {
		if eventKey(got[i]) != eventKey(evs[i]) {
			t.Errorf("event %d: got %+v want %+v", i, got[i], evs[i])
		}
	}
	// Cut before the ends: Close balances the rest.
	cut := evs[:3] // controller X, worker 0 B command, B allreduce
	add := Close(cut, cut[len(cut)-1].TS+10)
	if len(add) != 2 || add[0].Name != "app.step" && add[0].Name != "allreduce" {
		t.Fatalf("Close added %+v", add)
	}
	var tf bytes.Buffer
	if err := Write(&tf, append(append([]Event(nil), cut...), add...)); err != nil {
		t.Fatal(err)
	}
	f, err := Read(tf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(f); err != nil {
		t.Fatal(err)
	}
}

func TestRecorderDrain(t *testing.T) {
	r := NewRecorder(ProcWorker(0), nil, true)
	var n int
	for i := range 2*chunkEvents + 10 {
		r.Record(&Event{Track: r.Track(ThreadCommands), Name: "x", Phase: Instant, TS: int64(i + 1)})
		if i%777 == 0 {
			if err := r.Drain(func(evs []Event) error {
				for _, e := range evs {
					n++
					if e.TS != int64(n) {
						t.Fatalf("drained event %d has ts %d", n, e.TS)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	rest := r.Events()
	if n+len(rest) != 2*chunkEvents+10 || rest[0].TS != int64(n+1) {
		t.Fatalf("drained %d, left %d starting at %d", n, len(rest), rest[0].TS)
	}
	var nilRec *Recorder
	nilRec.Record(&Event{}) // a nil recorder records nothing, without failing
	if nilRec.Timeline() || nilRec.Events() != nil {
		t.Fatal("nil recorder keeps events")
	}
}

func TestRingSnapshot(t *testing.T) {
	r := NewHeapRing(8, 3)
	r.SetPID(42)
	if s := r.Snapshot(); s.Command.Phase != 0 || len(s.Recent) != 0 || s.Worker != 3 || s.PID != 42 {
		t.Fatalf("empty ring snapshot %+v", s)
	}
	cmd := Track{ProcWorker(3), ThreadCommands}
	col := Track{ProcWorker(3), ThreadCollectives}
	long := strings.Repeat("n", 100)
	r.Put(&Event{Track: cmd, Name: long, Cat: CatCommand, Phase: Begin, TS: 10})
	for i := range 20 {
		r.Put(&Event{Track: col, Name: "allreduce", Cat: CatCollective, Phase: Begin, TS: int64(11 + 2*i), Args: Args{Seq: uint64(i + 1), Bytes: 4 << 20, Backend: "cpu", Op: "sum", Rank: 3, Set: HasRank}})
		if i < 19 {
			r.Put(&Event{Track: col, Name: "allreduce", Cat: CatCollective, Phase: End, TS: int64(12 + 2*i), Args: Args{Seq: uint64(i + 1)}})
		}
	}
	s := r.Snapshot()
	if s.Command.Phase != Begin || s.Command.Name != long[:nameBytes] || s.Command.TS != 10 {
		t.Fatalf("command state %+v", s.Command)
	}
	c := s.Collective
	if c.Phase != Begin || c.Name != "allreduce" || c.Args.Seq != 20 || c.Args.Bytes != 4<<20 || c.Args.Backend != "cpu" || c.Args.Op != "sum" || c.Args.Rank != 3 || c.Track.Thread != ThreadCollectives {
		t.Fatalf("collective state %+v", c)
	}
	if len(s.Recent) != 8 || s.Recent[7].Args.Seq != 20 || s.Recent[0].TS >= s.Recent[7].TS {
		t.Fatalf("recent %+v", s.Recent)
	}
	// Another mapping of the same memory reads the same.
	mem := make([]uint64, RingSize(8)/8)
	b := unsafeBytes(mem)
	w, err := NewRing(b, 8, 5)
	if err != nil {
		t.Fatal(err)
	}
	w.Put(&Event{Track: Track{ProcWorker(5), ThreadCommands}, Name: "f", Cat: CatCommand, Phase: End, TS: 99})
	a, err := AttachRing(b)
	if err != nil {
		t.Fatal(err)
	}
	if s := a.Snapshot(); s.Worker != 5 || s.Command.Name != "f" || s.Command.Phase != End {
		t.Fatalf("attached snapshot %+v", s)
	}
	if _, err := AttachRing(make([]byte, RingSize(8))); !errors.Is(err, ErrRing) {
		t.Fatalf("AttachRing(zeros) = %v", err)
	}
}

// TestRingActivity: activity events (a compile inside a command) stay in
// the history, leave the command's state alone, and the snapshot names
// the latest one; through a Site and through Record alike.
func TestRingActivity(t *testing.T) {
	r := NewHeapRing(8, 1)
	rec := NewRecorder(ProcWorker(1), r, false)
	cmd := rec.Track(ThreadCommands)
	act := rec.Track(ThreadActivity)
	rec.Record(&Event{Track: cmd, Name: "chorus.vm.capture", Cat: CatCommand, Phase: Begin, TS: 10})
	site := rec.NewSite(act, "NVRTC compile a.cu", CatActivity, Args{})
	site.Mark(Begin, 11, 0, 0, "")
	site.Mark(End, 12, 0, 0, "")
	rec.Record(&Event{Track: act, Name: "NVRTC compile b.cu", Cat: CatActivity, Phase: Begin, TS: 13})
	r.MarkEnded(ThreadActivity, 14, false) // no state slot: nothing happens
	s := r.Snapshot()
	if s.Command.Phase != Begin || s.Command.Name != "chorus.vm.capture" || s.Command.Cat != CatCommand {
		t.Fatalf("command state %+v", s.Command)
	}
	if a := s.Activity; a.Phase != Begin || a.Name != "NVRTC compile b.cu" || a.TS != 13 || a.Cat != CatActivity || a.Track.Thread != ThreadActivity {
		t.Fatalf("activity %+v", a)
	}
	if len(s.Recent) != 4 || s.Recent[2].Phase != End || s.Recent[2].Track.Thread != ThreadActivity {
		t.Fatalf("recent %+v", s.Recent)
	}
	rec.Record(&Event{Track: act, Name: "NVRTC compile b.cu", Cat: CatActivity, Phase: End, TS: 15})
	if a := r.Snapshot().Activity; a.Phase != End || a.TS != 15 {
		t.Fatalf("ended activity %+v", a)
	}
}

// TestRingConcurrent reads while a writer puts: every slot read is whole
// (its fields agree), never torn. Run with -race.
func TestRingConcurrent(t *testing.T) {
	r := NewHeapRing(4, 0)
	tr := Track{ProcWorker(0), ThreadCollectives}
	act := Track{ProcWorker(0), ThreadActivity}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r.Put(&Event{Track: tr, Name: "allreduce", Cat: CatCollective, Phase: Begin, TS: int64(i), Args: Args{Seq: i, Bytes: int64(i) * 3}})
			if i%3 == 0 { // an activity now and then: history only
				r.Put(&Event{Track: act, Name: "compile", Cat: CatActivity, Phase: Begin, TS: int64(i), Args: Args{Seq: i, Bytes: int64(i) * 3}})
			}
		}
	}()
	for range 2000 {
		s := r.Snapshot()
		for _, e := range append(s.Recent, s.Collective, s.Activity) {
			if e.Phase == 0 {
				continue
			}
			name := map[string]string{ThreadCollectives: "allreduce", ThreadActivity: "compile"}[e.Track.Thread]
			if e.Args.Bytes != int64(e.Args.Seq)*3 || e.TS != int64(e.Args.Seq) || e.Name != name {
				t.Fatalf("torn slot %+v", e)
			}
		}
		if c := s.Collective; c.Phase != 0 && c.Track.Thread != ThreadCollectives {
			t.Fatalf("an activity in the collectives' state: %+v", c)
		}
	}
	close(stop)
	wg.Wait()
}

func TestWorkerOf(t *testing.T) {
	for _, c := range []struct {
		in      string
		id      int
		gpu, ok bool
	}{{"worker 3", 3, false, true}, {"worker 12 gpu", 12, true, true}, {"session 2: worker 1", 1, false, true}, {"controller", 0, false, false}, {"worker -1", 0, false, false}, {"worker 01", 0, false, false}} {
		id, gpu, ok := WorkerOf(c.in)
		if id != c.id || gpu != c.gpu || ok != c.ok {
			t.Errorf("WorkerOf(%q) = %d %v %v", c.in, id, gpu, ok)
		}
	}
}

func TestReopen(t *testing.T) {
	tr := Track{ProcWorker(1), ThreadCommands}
	head := []Event{{Track: tr, Name: "sync", Phase: Begin, TS: 1}, {Track: tr, Name: "sync", Phase: End, TS: 2}}
	// The ring lost the starts of "outer" and "inner" (and kept a whole
	// span "x" inside them).
	tail := []Event{
		{Track: tr, Name: "x", Phase: Begin, TS: 10}, {Track: tr, Name: "x", Phase: End, TS: 11},
		{Track: tr, Name: "inner", Phase: End, TS: 12}, {Track: tr, Name: "outer", Phase: End, TS: 13},
		{Track: tr, Name: "next", Phase: Begin, TS: 14},
	}
	re := Reopen(head, tail)
	if len(re) != 2 || re[0].Name != "outer" || re[1].Name != "inner" || re[0].TS != 10 || re[0].Args.Set&HasUnfinished == 0 {
		t.Fatalf("Reopen = %+v", re)
	}
	all := append(append(append([]Event(nil), head...), re...), tail...)
	all = append(all, Close(all, 20)...)
	var buf bytes.Buffer
	if err := Write(&buf, all); err != nil {
		t.Fatal(err)
	}
	f, err := Read(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(f); err != nil {
		t.Fatal(err)
	}
}

// TestMeta: otherData entries are written (sorted, as JSON) next to the
// origin and read back; the reserved keys stay the package's.
func TestMeta(t *testing.T) {
	meta := map[string]any{
		"hosts":          []map[string]any{{"node": 1, "clock_offset_ns": int64(-5_000_000_123)}},
		"b":              "text \"quoted\"",
		"origin_unix_ns": 42, // reserved: ignored
	}
	evs := sample()
	var buf bytes.Buffer
	if err := WriteFile(&buf, &File{Origin: Earliest(evs), Events: evs, Meta: meta}); err != nil {
		t.Fatal(err)
	}
	if i, j := strings.Index(buf.String(), `"b":`), strings.Index(buf.String(), `"hosts":`); i < 0 || j < i {
		t.Fatalf("otherData not sorted:\n%s", buf.String()[:300])
	}
	f, err := Read(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(f); err != nil {
		t.Fatal(err)
	}
	if f.Origin != Earliest(evs) || f.Meta["b"] != "text \"quoted\"" || f.Meta["origin_unix_ns"] != nil || f.Meta["clock"] != nil {
		t.Fatalf("origin %d, meta %v", f.Origin, f.Meta)
	}
	hosts, ok := f.Meta["hosts"].([]any)
	if !ok || len(hosts) != 1 || hosts[0].(map[string]any)["clock_offset_ns"] != json.Number("-5000000123") {
		t.Fatalf("hosts %#v", f.Meta["hosts"])
	}
	if err := WriteFile(&buf, &File{Meta: map[string]any{"bad": func() {}}}); err == nil {
		t.Fatal("a value JSON cannot hold was written")
	}
}
