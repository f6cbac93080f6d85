package cpu

import "sync"

// threadsFor is how many threads (goroutines) one rank uses for a
// reduction or copy of bytes bytes: the cores that are its share of the
// host (cpus / ranks: every rank of the communicator is on this host), no
// more than the Ps its process can run at once for it (procs /
// ranksHere, ranksHere being the ranks that share this process), and no
// more than there are blocks of minBytes of work. fixed > 0 replaces the
// share (Options.Threads). Never less than 1.
func threadsFor(bytes, minBytes, ranks, ranksHere, cpus, procs, fixed int) int {
	share := min(cpus/max(1, ranks), procs/max(1, ranksHere))
	if fixed > 0 {
		share = fixed
	}
	return max(1, min(share, bytes/max(1, minBytes)))
}

// parallel splits [0, size) into t element-aligned ranges and runs fn on
// each, t-1 of them on goroutines it starts and waits for (the caller
// runs the first). It returns the first error by range order.
func parallel(t, size, es int, fn func(i, lo, hi int) error) error {
	if t <= 1 {
		return fn(0, 0, size)
	}
	elems := size / es
	per := (elems + t - 1) / t
	errs := make([]error, t)
	var wg sync.WaitGroup
	for i := 1; i < t; i++ {
		lo, hi := min(elems, i*per)*es, min(elems, (i+1)*per)*es
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i, lo, hi)
		}()
	}
	errs[0] = fn(0, 0, min(elems, per)*es)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
