package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/chorus-rt/chorus/ccl/hier"
	"github.com/chorus-rt/chorus/net/link"
)

// `chorus cluster bench stream`: what a link between two hosts carries at
// all, as the anchor for the cross-host collectives: a plain TCP stream
// and a TLS 1.3 stream made exactly like the cpu-hier data links
// (net/link, the same buffering and record sizes), one direction or
// both at once (as in a ring step), with the CPU time both ends spent.
// One end serves (--serve, bounded by --conns and --timeout), the other
// connects and prints one JSON line per repetition; the server prints
// its own line per connection.

// streamResult is one JSON line.
type streamResult struct {
	Bench   string  `json:"bench"`
	Role    string  `json:"role"`
	Mode    string  `json:"mode"` // tcp | tls
	Dir     string  `json:"dir"`  // uni | bidi
	Bytes   int64   `json:"bytes"`
	TimeUs  float64 `json:"time_us"`
	Gbits   float64 `json:"gbit_s"`     // per direction
	CPUUser float64 `json:"cpu_user_s"` // this process, during the transfer
	CPUSys  float64 `json:"cpu_sys_s"`
}

const streamHdr = 16

func clusterBenchStream(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("cluster bench stream", "chorus cluster bench stream (--serve --listen ADDR | --connect ADDR) [--tls] [--bidi] [--bytes 256M] (--token-file F | --ca ...)", out)
	serve := fs.Bool("serve", false, "serve: accept --conns connections on --listen")
	listen := fs.String("listen", "127.0.0.1:29500", "address to serve on")
	connect := fs.String("connect", "", "server to connect to")
	useTLS := fs.Bool("tls", false, "TLS 1.3 with the data links' settings (else plain TCP)")
	bidi := fs.Bool("bidi", false, "both ends send at once")
	sizeS := fs.String("bytes", "256M", "bytes per direction and repetition")
	reps := fs.Int("reps", 3, "repetitions (connections)")
	conns := fs.Int("conns", 3, "with --serve: connections to serve before exiting")
	timeout := fs.Duration("timeout", 60*time.Second, "bound on the whole run")
	files := link.Files{}
	credFlags(fs, &files)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	const cmd = "cluster bench stream"
	size, err := parseSizeFlag(cmd, "bytes", *sizeS)
	if err != nil {
		return err
	}
	if *reps < 1 {
		return badFlag(cmd, "reps", *reps, "want 1 or more")
	}
	if *conns < 1 {
		return badFlag(cmd, "conns", *conns, "want 1 or more")
	}
	if *serve == (*connect != "") {
		return usageError{"cluster bench stream: give one of --serve and --connect"}
	}
	var cfg *link.Config
	if *useTLS {
		if cfg, err = files.Load(); err != nil {
			return err
		}
		cfg.Buffer = hier.LinkBuffer
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	mode := map[bool]string{false: "tcp", true: "tls"}[*useTLS]
	emit := func(r streamResult) { _ = json.NewEncoder(out).Encode(r) }
	if *serve {
		return streamServe(ctx, *listen, cfg, *conns, mode, emit)
	}
	for range *reps {
		r, err := streamClient(ctx, *connect, cfg, size, *bidi)
		if err != nil {
			return fmt.Errorf("cluster bench stream: %w", err)
		}
		r.Mode = mode
		emit(r)
	}
	return nil
}

func streamServe(ctx context.Context, addr string, cfg *link.Config, conns int, mode string, emit func(streamResult)) error {
	var accept func(context.Context) (net.Conn, error)
	if cfg != nil {
		ln, err := link.Listen(addr, cfg, "stream")
		if err != nil {
			return err
		}
		defer ln.Close()
		accept = func(ctx context.Context) (net.Conn, error) { return ln.Accept(ctx) }
	} else {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		defer ln.Close()
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		defer stop()
		accept = func(context.Context) (net.Conn, error) { return ln.Accept() }
	}
	for range conns {
		c, err := accept(ctx)
		if err != nil {
			return fmt.Errorf("cluster bench stream: accept: %w", err)
		}
		r, err := streamServeOne(ctx, c)
		c.Close()
		if err != nil {
			return fmt.Errorf("cluster bench stream: serve: %w", err)
		}
		r.Mode = mode
		emit(r)
	}
	return nil
}

func streamServeOne(ctx context.Context, c net.Conn) (streamResult, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var h [streamHdr]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return streamResult{}, err
	}
	size, bidi := int64(binary.LittleEndian.Uint64(h[:])), h[8] == 1
	if size <= 0 || size > 1<<40 {
		return streamResult{}, fmt.Errorf("bad size %d", size)
	}
	u0, s0 := cpuTimes()
	t0 := time.Now()
	err := streamMove(c, size, bidi, true)
	if err == nil {
		_, err = c.Write([]byte{1})
		if err == nil {
			err = flushConn(c)
		}
	}
	return streamResultOf("server", size, bidi, time.Since(t0), u0, s0), err
}

func streamClient(ctx context.Context, addr string, cfg *link.Config, size int64, bidi bool) (streamResult, error) {
	var c net.Conn
	var err error
	if cfg != nil {
		c, err = cfg.Dial(ctx, addr, "stream")
	} else {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return streamResult{}, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var h [streamHdr]byte
	binary.LittleEndian.PutUint64(h[:], uint64(size))
	if bidi {
		h[8] = 1
	}
	if _, err := c.Write(h[:]); err != nil {
		return streamResult{}, err
	}
	if err := flushConn(c); err != nil {
		return streamResult{}, err
	}
	u0, s0 := cpuTimes()
	t0 := time.Now()
	if err := streamMove(c, size, bidi, false); err != nil {
		return streamResult{}, err
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return streamResult{}, fmt.Errorf("ack: %w", err)
	}
	return streamResultOf("client", size, bidi, time.Since(t0), u0, s0), nil
}

// streamMove sends size bytes (client, or both ends when bidi) while
// receiving size bytes (server, or both when bidi), 1 MiB per call.
func streamMove(c net.Conn, size int64, bidi, server bool) error {
	const chunk = 1 << 20
	send, recv := !server || bidi, server || bidi
	var wg sync.WaitGroup
	var werr error
	if send {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, chunk)
			for off := int64(0); off < size; off += chunk {
				if _, werr = c.Write(buf[:min(chunk, size-off)]); werr != nil {
					return
				}
			}
			werr = flushConn(c)
		}()
	}
	var rerr error
	if recv {
		buf := make([]byte, chunk)
		for off := int64(0); off < size && rerr == nil; off += chunk {
			_, rerr = io.ReadFull(c, buf[:min(chunk, size-off)])
		}
	}
	wg.Wait()
	return errors.Join(werr, rerr)
}

func flushConn(c net.Conn) error {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		return link.Flush(nc)
	}
	return nil
}

func cpuTimes() (user, sys float64) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()).Seconds(), time.Duration(ru.Stime.Nano()).Seconds()
}

func streamResultOf(role string, size int64, bidi bool, d time.Duration, u0, s0 float64) streamResult {
	u1, s1 := cpuTimes()
	dir := "uni"
	if bidi {
		dir = "bidi"
	}
	return streamResult{Bench: "stream", Role: role, Dir: dir, Bytes: size, TimeUs: float64(d.Microseconds()),
		Gbits: float64(size) * 8 / d.Seconds() / 1e9, CPUUser: u1 - u0, CPUSys: s1 - s0}
}
