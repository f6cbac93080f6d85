package main

import (
	"context"
	"fmt"
	"log"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
)

func init() {
	// Typed functions: arguments are checked before the call, so a wrong
	// count or type is a clear error, not a panic.
	registry.MustRegisterTyped("app.scale", func(env registry.Env, x float64) float64 {
		return x * float64(env.WorkerID()+1)
	})
}

func main() {
	worker.Main() // first: a process started by a session becomes a worker here
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	s, err := session.NewProcess(ctx, session.ProcessOptions{
		Options: session.Options{NumWorkers: 4}, // Transport: "shm" by default
	})
	if err != nil {
		return err
	}
	defer s.Shutdown()

	f, err := s.GetGlobalFunc(ctx, "app.scale") // unknown names fail here
	if err != nil {
		return err
	}
	r, err := s.CallPacked(f, 2.5) // asynchronous, on every worker
	if err != nil {
		return err
	}
	if err := s.Sync(ctx); err != nil { // worker failures surface here
		return err
	}
	for w := range s.NumWorkers() {
		v, err := s.DebugGetFromRemote(ctx, r, w) // worker 3: 10
		if err != nil {
			return err
		}
		fmt.Printf("worker %d: %v\n", w, v)
	}
	return s.Shutdown()
}
