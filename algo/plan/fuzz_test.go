package plan

import (
	"bytes"
	"os"
	"testing"
)

// FuzzRead: the decoder never panics, nor do Validate, Show and Access on
// what it accepts, and an accepted plan re-encodes to a fixed point.
func FuzzRead(f *testing.F) {
	for _, name := range goldenFiles(f) {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"name":"x","collective":"allreduce","protocol":"LL","inplace":true,"gpus":[{"id":0,"input_chunks":1,"output_chunks":1,"scratch_chunks":0,"threadblocks":[{"id":0,"ops":[{"name":"put","src_buff":[{"type":"i","index":0,"size":1}],"dst_buff":[{"buffer_id":3,"index":0,"size":1}],"channel_type":"port"}],"channels":[],"remote_buffer_refs":[]}],"channels":[],"remote_buffers":[]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		_ = p.Validate()
		_ = p.Show(&bytes.Buffer{})
		for gi := range p.GPUs {
			_, _ = p.Layout(gi, 1<<20, 1<<20)
			for ti := range p.GPUs[gi].ThreadBlocks {
				for oi := range p.GPUs[gi].ThreadBlocks[ti].Ops {
					_, _ = p.Access(gi, ti, oi)
					_, _ = p.Peers(gi, ti, &p.GPUs[gi].ThreadBlocks[ti].Ops[oi])
				}
			}
		}
		out, err := p.Marshal()
		if err != nil {
			t.Fatalf("accepted plan does not encode: %v", err)
		}
		q, err := Parse(out)
		if err != nil {
			t.Fatalf("re-encoded plan does not decode: %v\n%s", err, out)
		}
		out2, err := q.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("encoding is not stable:\n%s\n---\n%s", out, out2)
		}
	})
}
