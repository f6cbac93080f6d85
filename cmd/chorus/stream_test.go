package main

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClusterBenchStream runs both ends of the stream benchmark on
// loopback, plain and TLS, one way and both ways.
func TestClusterBenchStream(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if code, _, errOut := runCLI(t, "cert", "token", "-o", tok); code != 0 {
		t.Fatal(errOut)
	}
	for _, tc := range []struct{ args []string }{
		{nil}, {[]string{"--bidi"}}, {[]string{"--tls", "--token-file", tok}}, {[]string{"--tls", "--bidi", "--token-file", tok}},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		var srvArgs []string
		for _, a := range tc.args {
			if a != "--bidi" {
				srvArgs = append(srvArgs, a)
			}
		}
		type res struct {
			code      int
			out, errs string
		}
		done := make(chan res, 1)
		go func() {
			code, out, errOut := runCLI(t, append([]string{"cluster", "bench", "stream", "--serve", "--listen", addr, "--conns", "2", "--timeout", "20s"}, srvArgs...)...)
			done <- res{code, out, errOut}
		}()
		var code int
		var out, errOut string
		// The server may not listen yet: retry a refused dial, pausing
		// between tries (back-to-back tries once all failed before a busy
		// 2-core CI machine ran the server's goroutine).
		for range 500 {
			code, out, errOut = runCLI(t, append([]string{"cluster", "bench", "stream", "--connect", addr, "--reps", "2", "--bytes", "3M", "--timeout", "20s"}, tc.args...)...)
			if code == 0 || !strings.Contains(errOut, "refused") {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		srv := <-done
		if code != 0 || srv.code != 0 {
			t.Fatalf("%v: client %d %s; server %d %s", tc.args, code, errOut, srv.code, srv.errs)
		}
		for _, text := range []string{out, srv.out} {
			lines := strings.Split(strings.TrimSpace(text), "\n")
			if len(lines) != 2 {
				t.Fatalf("%v: %d lines: %q", tc.args, len(lines), text)
			}
			var r streamResult
			if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
				t.Fatal(err)
			}
			wantMode, wantDir := "tcp", "uni"
			if len(tc.args) > 0 && tc.args[0] == "--tls" {
				wantMode = "tls"
			}
			if strings.Contains(strings.Join(tc.args, " "), "--bidi") {
				wantDir = "bidi"
			}
			if r.Bytes != 3<<20 || r.Mode != wantMode || r.Dir != wantDir || r.Gbits <= 0 {
				t.Fatalf("%v: %+v", tc.args, r)
			}
		}
	}
	if code, _, errOut := runCLI(t, "cluster", "bench", "stream"); code != 2 || !strings.Contains(errOut, "one of --serve and --connect") {
		t.Fatalf("no role: %d %s", code, errOut)
	}
}
