package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// sampler picks the next token from a row of logits on the controller:
// greedy (the first largest) at temperature 0, else softmax(logits / T)
// restricted to the top-k tokens and then to the smallest set whose
// probability reaches top-p, drawn from a seeded generator, so a seed
// gives the same tokens on every run.
type sampler struct {
	temperature float64
	topK        int     // 0: no limit
	topP        float64 // 1: no limit
	rng         *rand.Rand
}

func newSampler(temperature float64, topK int, topP float64, seed uint64) (*sampler, error) {
	switch {
	case math.IsNaN(temperature) || temperature < 0 || math.IsInf(temperature, 0):
		return nil, usageError{fmt.Sprintf("generate: --temperature %v: want a number >= 0 (0: greedy)", temperature)}
	case topK < 0:
		return nil, usageError{fmt.Sprintf("generate: --top-k %d: want >= 0 (0: no limit)", topK)}
	case !(topP > 0 && topP <= 1):
		return nil, usageError{fmt.Sprintf("generate: --top-p %v: want 0 < p <= 1 (1: no limit)", topP)}
	}
	return &sampler{temperature: temperature, topK: topK, topP: topP, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}, nil
}

// greedy reports whether the sampler is the argmax.
func (s *sampler) greedy() bool { return s.temperature == 0 }

// next picks a token of logits.
func (s *sampler) next(logits []float64) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	if s.greedy() {
		return best
	}
	idx := make([]int, len(logits))
	for i := range idx {
		idx[i] = i
	}
	// Largest first; ties by id, so the order is the same every run.
	sort.SliceStable(idx, func(a, b int) bool { return logits[idx[a]] > logits[idx[b]] })
	if s.topK > 0 && s.topK < len(idx) {
		idx = idx[:s.topK]
	}
	p := make([]float64, len(idx))
	top, sum := logits[idx[0]], 0.0
	for i, id := range idx {
		p[i] = math.Exp((logits[id] - top) / s.temperature)
		sum += p[i]
	}
	keep, acc := len(idx), 0.0
	for i := range p {
		p[i] /= sum
		acc += p[i]
		if acc >= s.topP {
			keep = i + 1
			break
		}
	}
	idx, p = idx[:keep], p[:keep]
	mass := 0.0
	for _, v := range p {
		mass += v
	}
	r := s.rng.Float64() * mass
	for i, v := range p {
		if r < v {
			return idx[i]
		}
		r -= v
	}
	return idx[len(idx)-1]
}
