//go:build linux

package cpu

import (
	"testing"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// TestDescLayout: both parities' descriptors lie in the arrival
// counter's 64-byte line, without overlapping the counter or each other.
func TestDescLayout(t *testing.T) {
	if ctlArrive != 0 || ctlDesc < ctlArrive+8 {
		t.Fatalf("descriptors at %d overlap the arrival counter at %d", ctlDesc, ctlArrive)
	}
	if end := ctlDesc + 2*descBytes; end > 64 {
		t.Errorf("descriptors end at byte %d of the control block, past its first 64-byte line", end)
	}
	if ctrlSize%128 != 0 || hdrSize%128 != 0 {
		t.Errorf("control blocks (%d bytes after a %d-byte header) do not start on a line", ctrlSize, hdrSize)
	}
}

// TestDescPack: every field survives the round trip, and changing any one
// of them (or the status) changes the words, so that begin's word compare
// sees every disagreement.
func TestDescPack(t *testing.T) {
	base := ccl.Desc{Kind: ccl.KindAllReduce, DType: tensor.Float32, Op: reduce.Sum, Root: 0, Count: 1024}
	variants := []ccl.Desc{
		{Kind: ccl.KindAllGather, DType: tensor.Float32, Op: reduce.Sum, Count: 1024},
		{Kind: ccl.KindAllReduce, DType: tensor.Int32, Op: reduce.Sum, Count: 1024},
		{Kind: ccl.KindAllReduce, DType: tensor.Float32, Op: reduce.Max, Count: 1024},
		{Kind: ccl.KindAllReduce, DType: tensor.Float32, Op: reduce.Sum, Root: 1, Count: 1024},
		{Kind: ccl.KindAllReduce, DType: tensor.Float32, Op: reduce.Sum, Root: -1, Count: 1024},
		{Kind: ccl.KindAllReduce, DType: tensor.Float32, Op: reduce.Sum, Count: 1025},
		{Kind: ccl.KindAllReduce, DType: tensor.Float32, Op: reduce.Sum, Count: 1024 + 1<<40},
	}
	b0, b1 := packDesc(base, false)
	for _, bad := range []bool{false, true} {
		for i, d := range append([]ccl.Desc{base}, variants...) {
			w0, w1 := packDesc(d, bad)
			got, gotBad := unpackDesc(w0, w1)
			if got != d || gotBad != bad {
				t.Errorf("%+v bad=%v: unpacked as %+v bad=%v", d, bad, got, gotBad)
			}
			if same := w0 == b0 && w1 == b1; same != (i == 0 && !bad) {
				t.Errorf("%+v bad=%v: words equal to the base's: %v", d, bad, same)
			}
		}
	}
}

// FuzzDesc: packDesc and unpackDesc are inverse for any descriptor, and
// any two words decode (peers' words come from shared memory).
func FuzzDesc(f *testing.F) {
	f.Add(uint8(1), uint8(tensor.Float32), uint8(reduce.Sum), int32(0), int64(256), false)
	f.Add(uint8(4), uint8(tensor.BFloat16), uint8(reduce.Avg), int32(-1), int64(-1), true)
	f.Add(uint8(255), uint8(255), uint8(255), int32(1<<31-1), int64(1<<63-1), false)
	f.Fuzz(func(t *testing.T, kind, dt, op uint8, root int32, count int64, bad bool) {
		d := ccl.Desc{Kind: ccl.Kind(kind), DType: tensor.DType(dt), Op: reduce.Op(op), Root: root, Count: count}
		got, gotBad := unpackDesc(packDesc(d, bad))
		if got != d || gotBad != bad {
			t.Fatalf("%+v bad=%v: unpacked as %+v bad=%v", d, bad, got, gotBad)
		}
		w0, w1 := uint64(count)^uint64(root)<<7, uint64(kind)<<56|uint64(op)
		if d2, bad2 := unpackDesc(w0, w1); d2.Count != int64(w1) {
			t.Fatalf("words %#x %#x decoded to %+v bad=%v", w0, w1, d2, bad2)
		}
	})
}
