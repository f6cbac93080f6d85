package session_test

import (
	"context"
	"testing"

	"github.com/chorus-rt/chorus/runtime/session"
)

// BenchmarkNoopSync is the loop of `chorus bench session`: a no-op call
// followed by a sync of every worker.
func BenchmarkNoopSync(b *testing.B) {
	for _, k := range kinds {
		for _, n := range []int{1, 4, 8} {
			b.Run(k.name+"/"+itoa(n), func(b *testing.B) {
				t := &testing.T{}
				_ = t
				var s *session.Session
				var err error
				switch k.name {
				case "threaded":
					s, err = session.NewThreaded(session.Options{NumWorkers: n})
				default:
					s, err = session.NewProcess(context.Background(), session.ProcessOptions{Options: session.Options{NumWorkers: n}, Transport: k.name[len("process-"):]})
				}
				if err != nil {
					b.Fatal(err)
				}
				defer s.Shutdown()
				ctx := context.Background()
				f, err := s.GetGlobalFunc(ctx, "chorus.noop")
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if err := s.CallPackedDiscard(f); err != nil {
						b.Fatal(err)
					}
					if err := s.Sync(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func itoa(n int) string { return string(rune('0' + n)) }
