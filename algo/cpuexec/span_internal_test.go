package cpuexec

import (
	"slices"
	"testing"
)

func TestSpans(t *testing.T) {
	cases := []struct {
		name string
		s    []span
		cut  span
		add  span
		want []span
	}{
		{"empty", nil, span{0, 0}, span{0, 8}, []span{{0, 8}}},
		{"cut the middle", []span{{0, 100}}, span{10, 20}, span{0, 0}, []span{{0, 10}, {20, 100}}},
		{"cut the middle, add below", []span{{0, 100}}, span{10, 20}, span{0, 10}, []span{{0, 10}, {20, 100}}},
		{"add bridges", []span{{0, 10}, {20, 30}}, span{0, 0}, span{5, 25}, []span{{0, 30}}},
		{"add touching", []span{{0, 10}}, span{0, 0}, span{10, 12}, []span{{0, 12}}},
		{"add between", []span{{0, 10}, {50, 60}}, span{0, 0}, span{20, 30}, []span{{0, 10}, {20, 30}, {50, 60}}},
		{"cut all", []span{{0, 10}, {20, 30}}, span{0, 40}, span{0, 0}, nil},
		{"cut edges", []span{{0, 10}, {20, 30}}, span{5, 25}, span{0, 0}, []span{{0, 5}, {25, 30}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := addSpan(cut(slices.Clone(c.s), c.cut.lo, c.cut.hi), c.add)
			if len(got) == 0 && len(c.want) == 0 {
				return
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}
