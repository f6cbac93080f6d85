package shard

import "testing"

// FuzzSpec: the spec parser never panics, and what it accepts compiles
// and survives a JSON round trip.
func FuzzSpec(f *testing.F) {
	f.Add([]byte(`{"rules":[{"match":"layers.*.attn.wq","split":1}]}`))
	f.Add([]byte(`{"default":"error","rules":[{"regex":"a(b|c)*","func":"fused","args":[0,4,4]},{"match":"**","replicate":true,"dtype":"bf16","convert":"float16"}]}`))
	f.Add([]byte(`{"rules":[{"match":"*.*.**","split":-1}]}`))
	f.Add([]byte(`{"rules":[{"regex":"(","split":0}]}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		s, err := ParseSpec(js)
		if err != nil {
			return
		}
		out, err := s.JSON()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseSpec(out); err != nil {
			t.Fatalf("round trip of %s: %v", out, err)
		}
		c, _ := s.compile()
		for _, name := range []string{"", "a", "layers.0.attn.wq", "x.y.z"} {
			c.find(name)
		}
	})
}
