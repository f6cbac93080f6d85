package session_test

import (
	"context"
	"fmt"
	"log"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// A session of 4 goroutine workers calls a registered function on every
// worker at once; each result stays on its worker until asked for.
// (session.NewProcess makes the same session of child processes; its
// program calls worker.Main first in main: examples/hello.)
func ExampleNewThreaded() {
	reg := registry.New() // nil Registry: registry.Global
	err := reg.RegisterTyped("app.scale", func(env registry.Env, x float64) float64 {
		return x * float64(env.WorkerID()+1)
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	s, err := session.NewThreaded(session.Options{NumWorkers: 4, Registry: reg})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown()
	f, err := s.GetGlobalFunc(ctx, "app.scale") // an unknown name fails here
	if err != nil {
		log.Fatal(err)
	}
	r, err := s.CallPacked(f, 2.5) // asynchronous: r names the result on every worker
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil { // a worker's failure surfaces here
		log.Fatal(err)
	}
	for w := range s.NumWorkers() {
		v, err := s.DebugGetFromRemote(ctx, r, w)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("worker %d: %v\n", w, v)
	}
	// Output:
	// worker 0: 2.5
	// worker 1: 5
	// worker 2: 7.5
	// worker 3: 10
}

// Collectives between the workers of a session: the "cpu" backend (shared
// memory), an all-reduce of a tensor that lives on every worker.
func ExampleSession_InitCCL() {
	ctx := context.Background()
	s, err := session.NewThreaded(session.Options{NumWorkers: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown()
	if err := s.InitCCL(ctx, "cpu", 0); err != nil { // 0: the default timeout
		log.Fatal(err)
	}
	empty, err := s.GetGlobalFunc(ctx, "chorus.empty")
	if err != nil {
		log.Fatal(err)
	}
	allreduce, err := s.GetGlobalFunc(ctx, "chorus.allreduce")
	if err != nil {
		log.Fatal(err)
	}
	// chorus.empty(shape, dtype, device, worker0_only, in_group)
	x, err := s.CallPacked(empty, tensor.Shape{4}, tensor.Float32, nil, false, false)
	if err != nil {
		log.Fatal(err)
	}
	for w := range s.NumWorkers() { // worker w holds w+1 everywhere
		t := tensor.MustNew(tensor.Float32, tensor.Shape{4})
		tensor.Fill(t, float64(w+1))
		if err := s.DebugSetRegister(x, t, w); err != nil {
			log.Fatal(err)
		}
	}
	// chorus.allreduce(in, op, in_group, out): in place here
	if err := s.CallPackedDiscard(allreduce, x, "sum", false, x); err != nil {
		log.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil { // a mismatch or a timeout surfaces here
		log.Fatal(err)
	}
	for _, w := range []int{0, 3} {
		v, err := s.DebugGetFromRemote(ctx, x, w)
		if err != nil {
			log.Fatal(err)
		}
		d, _ := tensor.ToFloat64(v.(*tensor.Tensor))
		fmt.Printf("worker %d: %v\n", w, d)
	}
	// Output:
	// worker 0: [10 10 10 10]
	// worker 3: [10 10 10 10]
}
