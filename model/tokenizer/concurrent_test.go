package tokenizer

import (
	"fmt"
	"sync"
	"testing"
)

// TestConcurrentEncode encodes from several goroutines at once (run it with
// -race): the word cache and scratch buffers are shared.
func TestConcurrentEncode(t *testing.T) {
	docs := loadCorpus(t)[:200]
	tok := loadGolden(t, "llama2")
	want := make([]string, len(docs))
	for i, d := range docs {
		ids, err := tok.Encode(d, true)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = fmt.Sprint(ids)
	}
	fresh := loadGolden(t, "llama2")
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := range docs {
				i := (k*7 + g*13) % len(docs)
				ids, err := fresh.Encode(docs[i], true)
				if err == nil && fmt.Sprint(ids) != want[i] {
					err = fmt.Errorf("doc %d differs under concurrency", i)
				}
				if err == nil {
					_, err = fresh.Decode(ids, true)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
