package shard

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/model/safetensors"
	"github.com/chorus-rt/chorus/tensor"
)

// BenchmarkLoad: one rank of two loading its half of a 64 MiB float32
// [4096, 4096] tensor (from the page cache after the first round), by
// rows (one range), by columns (4096 ranges of 8 KiB), into new host
// tensors and through the fake device's staging into a reused buffer
// (host copies only: the shape of the loop, not a GPU's speed), next to
// one plain pread of as many bytes.
func BenchmarkLoad(b *testing.B) {
	dir := b.TempDir()
	x := tensor.MustNew(tensor.Float32, tensor.Shape{4096, 4096})
	tensor.Random(x, 1)
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), []safetensors.Named{{Name: "w", Tensor: x}}, nil); err != nil {
		b.Fatal(err)
	}
	// The anchor: one pread of the same 32 MiB into a reused buffer.
	b.Run("anchor/pread", func(b *testing.B) {
		f, err := os.Open(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		p := make([]byte, x.NumBytes()/2)
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			if _, err := f.ReadAt(p, 4096); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, dim := range []int{0, 1} {
		spec := &Spec{Rules: []Rule{{Match: "w", Split: &dim}}}
		l, err := Open(dir, spec, 1, 2)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("host/split%d", dim), func(b *testing.B) {
			b.SetBytes(x.NumBytes() / 2)
			for b.Loop() {
				if _, err := l.Load("w"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("fakedevice/split%d", dim), func(b *testing.B) {
			dev := device.NewFake(0, 1<<30)
			defer dev.Close()
			st, err := NewStaging(dev, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			buf, _ := dev.Alloc(x.NumBytes() / 2)
			b.SetBytes(x.NumBytes() / 2)
			for b.Loop() {
				if err := l.LoadDevice("w", st, buf, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
		l.Close()
	}
}
