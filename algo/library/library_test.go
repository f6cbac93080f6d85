package library

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/algo/plan"
)

func TestEveryAlgorithmLowers(t *testing.T) {
	for _, name := range Names() {
		for n := MinRanks; n <= MaxRanks; n++ {
			for _, inst := range []int{1, 2} {
				t.Run(fmt.Sprintf("%s/n=%d/i=%d", name, n, inst), func(t *testing.T) {
					pl, err := Build(name, n, Options{Instances: inst})
					if err != nil {
						t.Fatal(err)
					}
					if err := pl.Validate(); err != nil {
						t.Fatal(err)
					}
					b, err := pl.Marshal()
					if err != nil {
						t.Fatal(err)
					}
					back, err := plan.Parse(b)
					if err != nil {
						t.Fatal(err)
					}
					b2, err := back.Marshal()
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(b, b2) {
						t.Fatal("plan does not round-trip through Marshal/Parse")
					}
					if pl.NumRanks() != n {
						t.Fatalf("%d ranks, want %d", pl.NumRanks(), n)
					}
				})
			}
		}
	}
}

func TestBuildErrors(t *testing.T) {
	tests := []struct {
		name  string
		ranks int
		opts  Options
		want  error
		msg   string
	}{
		{"nope", 4, Options{}, ErrUnknown, `library: unknown algorithm "nope"`},
		{"allreduce_ring", 1, Options{}, ErrRanks, "allreduce_ring for 1 ranks (supports 2..8)"},
		{"allgather_mesh", 9, Options{}, ErrRanks, "allgather_mesh for 9 ranks"},
		{"allgather_mesh", 4, Options{Instances: -1}, nil, "-1 instances"},
	}
	for _, tc := range tests {
		pl, err := Build(tc.name, tc.ranks, tc.opts)
		if pl != nil || err == nil || !strings.Contains(err.Error(), tc.msg) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("Build(%q, %d): %v, %v; want %q", tc.name, tc.ranks, pl, err, tc.msg)
		}
	}
}

func TestNamesAndDescribe(t *testing.T) {
	names := Names()
	if !slices.IsSorted(names) || len(names) < 8 {
		t.Fatalf("names %v", names)
	}
	for _, n := range names {
		coll, doc, ok := Describe(n)
		if !ok || doc == "" || !coll.Known() {
			t.Errorf("Describe(%q) = %q, %q, %v", n, coll, doc, ok)
		}
		if !strings.HasPrefix(n, string(coll)) {
			t.Errorf("%s implements %s", n, coll)
		}
	}
	if _, _, ok := Describe("nope"); ok {
		t.Error("Describe of an unknown name")
	}
}
