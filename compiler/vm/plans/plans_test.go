package plans_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/algo/handplan"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/vm/plans"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	ring, err := library.Build("allreduce_ring", 4, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ring.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "ring.json")
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	gather, err := library.Build("allgather_ring", 4, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if raw, err = gather.Marshal(); err != nil {
		t.Fatal(err)
	}
	gatherFile := filepath.Join(dir, "gather.json")
	if err := os.WriteFile(gatherFile, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		spec  string
		ranks int
		want  string // the plan's name ("": any), or text of the error
		err   bool
	}{
		{"allreduce_ring", 4, "allreduce_ring", false},
		{handplan.Names()[0], 2, "", false}, // named by the hand-written plan itself
		{file, 4, ring.Name, false},
		{file, 2, "4 ranks", true},
		{"allreduce_fastest", 4, `custom_allreduce plan "allreduce_fastest": neither a library algorithm`, true},
		{gatherFile, 4, "needs an allreduce", true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%d", filepath.Base(c.spec), c.ranks), func(t *testing.T) {
			p, err := plans.Resolve(c.spec, c.ranks)
			if c.err {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("err = %v, want one containing %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (c.want != "" && p.Name != c.want) || p.NumRanks() != c.ranks {
				t.Fatalf("plan %s of %d ranks, want %s of %d", p.Name, p.NumRanks(), c.want, c.ranks)
			}
		})
	}
	if _, err := plans.Resolve(filepath.Join(dir, "none.json"), 4); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want os.ErrNotExist", err)
	}
}

func TestSpecs(t *testing.T) {
	m, err := ir.Parse(`module @plans

func @f(%x: tensor<[6], float32, {cpu:0 scope="ipc_memory"}>, %y: tensor<[6], float32, {cpu:0 scope="ipc_memory"}>) {
  block {
    %o1 = alloc_tensor([6], float32, {cpu:0}, "global") : tensor<[6], float32, {cpu:0 scope="global"}>
    custom_allreduce(%x, "b", %o1)
    %o2 = alloc_tensor([6], float32, {cpu:0}, "global") : tensor<[6], float32, {cpu:0 scope="global"}>
    custom_allreduce(%y, "a", %o2)
    %o3 = alloc_tensor([6], float32, {cpu:0}, "global") : tensor<[6], float32, {cpu:0 scope="global"}>
    custom_allreduce(%x, "b", %o3)
    %o4 = alloc_tensor([6], float32, {cpu:0}, "global") : tensor<[6], float32, {cpu:0 scope="global"}>
    custom_allreduce(%x, one_shot, %o4)
  }
  return %o1, %o2, %o3, %o4
}
`)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(plans.Specs(m)); got != "[b a]" {
		t.Errorf("Specs = %s, want [b a] (first appearance, once each, strategies left out)", got)
	}
}
