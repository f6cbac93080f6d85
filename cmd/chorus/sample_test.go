package main

import (
	"math"
	"testing"
)

// TestSamplerGreedyLimit: temperature 0 is the argmax (the first on
// ties); a tiny temperature, or top-k 1, or a tiny top-p, picks the
// argmax too, whatever the seed.
func TestSamplerGreedyLimit(t *testing.T) {
	logits := []float64{0.1, 2.5, -1, 2.5 - 1e-3, 0.7}
	for _, tc := range []struct {
		temp float64
		k    int
		p    float64
	}{{0, 0, 1}, {1e-4, 0, 1}, {1, 1, 1}, {5, 0, 1e-9}} {
		for seed := range uint64(50) {
			s, err := newSampler(tc.temp, tc.k, tc.p, seed)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.next(logits); got != 1 {
				t.Fatalf("temperature %v, top-k %d, top-p %v, seed %d: %d, want the argmax 1", tc.temp, tc.k, tc.p, seed, got)
			}
		}
	}
}

// TestSamplerDeterministic: a seed gives the same tokens; the empirical
// distribution follows softmax(logits/T) over the top-k and top-p set.
func TestSamplerDeterministic(t *testing.T) {
	logits := []float64{1, 2, 3, 0, -5}
	draw := func(seed uint64, temp float64, k int, p float64, n int) []int {
		s, err := newSampler(temp, k, p, seed)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]int, n)
		for i := range out {
			out[i] = s.next(logits)
		}
		return out
	}
	a, b, c := draw(3, 1, 0, 1, 200), draw(3, 1, 0, 1, 200), draw(4, 1, 0, 1, 200)
	same := true
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 3 gave %d then %d at draw %d", a[i], b[i], i)
		}
		same = same && a[i] == c[i]
	}
	if same {
		t.Error("seeds 3 and 4 drew the same 200 tokens")
	}
	// Frequencies at T = 1 over all tokens.
	const n = 20000
	counts := make([]float64, len(logits))
	for _, x := range draw(9, 1, 0, 1, n) {
		counts[x]++
	}
	z := 0.0
	for _, v := range logits {
		z += math.Exp(v)
	}
	for i, v := range logits {
		want := math.Exp(v) / z
		if got := counts[i] / n; math.Abs(got-want) > 0.015 {
			t.Errorf("token %d drawn %.3f of the time, softmax gives %.3f", i, got, want)
		}
	}
	// top-k 2 draws only the two largest; top-p 0.7 only those reaching 70%.
	for _, x := range draw(1, 1, 2, 1, 500) {
		if x != 2 && x != 1 {
			t.Fatalf("top-k 2 drew %d", x)
		}
	}
	for _, x := range draw(1, 1, 0, 0.7, 500) {
		if x != 2 && x != 1 { // p(2) = 0.66, p(1) = 0.24
			t.Fatalf("top-p 0.7 drew %d", x)
		}
	}
}

func TestSamplerFlags(t *testing.T) {
	for _, tc := range []struct {
		temp float64
		k    int
		p    float64
		flag string
	}{{-1, 0, 1, "--temperature"}, {math.NaN(), 0, 1, "--temperature"}, {1, -2, 1, "--top-k"}, {1, 0, 0, "--top-p"}, {1, 0, 1.5, "--top-p"}} {
		if _, err := newSampler(tc.temp, tc.k, tc.p, 1); err == nil || !contains(err.Error(), tc.flag) {
			t.Errorf("%+v: %v, want an error naming %s", tc, err, tc.flag)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
