package session

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/chorus-rt/chorus/runtime/trace"
)

// mergeParts reads the workers' trace part files (parts[i] is worker
// i's, "" for none) and removes them. limit > 0 keeps at most limit
// bytes of each file, its newest lines: the older ones are dropped and
// counted in dropped, and spans whose begin was dropped get one at the
// first kept event of their track (marked unfinished). A worker that
// died took its unflushed events along; its flight recorder (rings[i],
// may be nil) still has the latest ones, which are added after the last
// flushed event (marked unfinished).
func mergeParts(parts []string, rings []*trace.Ring, limit int64) (evs []trace.Event, dropped int64, errs []error) {
	for w, p := range parts {
		if p == "" {
			continue
		}
		data, cut, err := readTail(p, limit)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		dropped += cut
		part, err := trace.ReadPart(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("worker part %s: %w", p, err))
		}
		if cut > 0 {
			evs = append(evs, trace.Reopen(nil, part)...)
		}
		evs = append(evs, part...)
		last := int64(0)
		for i := range part {
			last = max(last, part[i].TS)
		}
		if w < len(rings) && rings[w] != nil {
			var tail []trace.Event
			for _, e := range rings[w].Snapshot().Recent {
				if e.TS > last {
					e.Args.Set |= trace.HasUnfinished
					tail = append(tail, e)
				}
			}
			evs = append(evs, trace.Reopen(part, tail)...)
			evs = append(evs, tail...)
		}
		os.Remove(p)
	}
	return evs, dropped, errs
}

// readTail reads file p whole when limit <= 0 or it is not larger, else
// its last limit bytes from the first line that starts there; dropped
// counts the lines left out (the cut line included). The lines before
// are counted in a streaming pass, so memory stays within the limit.
func readTail(p string, limit int64) (data []byte, dropped int64, err error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := st.Size()
	if limit <= 0 || size <= limit {
		data, err = io.ReadAll(f)
		return data, 0, err
	}
	start := size - limit
	buf := make([]byte, 64<<10)
	for off := int64(0); off < start; {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), start-off)], off)
		dropped += int64(bytes.Count(buf[:n], []byte{'\n'}))
		off += int64(n)
		if err != nil {
			return nil, dropped, err
		}
	}
	data = make([]byte, limit)
	if _, err := f.ReadAt(data, start); err != nil && !errors.Is(err, io.EOF) {
		return nil, dropped, err
	}
	// The line cut at start is dropped too, unless start is a line's
	// first byte.
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		prevNL := false
		if start > 0 {
			var c [1]byte
			if _, err := f.ReadAt(c[:], start-1); err == nil {
				prevNL = c[0] == '\n'
			}
		}
		if !prevNL {
			data = data[i+1:]
			dropped++
		}
	} else {
		dropped++
		data = nil
	}
	return data, dropped, nil
}
