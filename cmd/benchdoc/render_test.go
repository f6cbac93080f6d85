package main

import (
	"errors"
	"os"
	"strings"
	"testing"
	"testing/fstest"
)

// TestBenchmarksDocCurrent fails when docs/benchmarks.md is not what
// scripts/benchdoc.sh writes from bench/results.
func TestBenchmarksDocCurrent(t *testing.T) {
	want, err := Render(os.DirFS("../../bench/results"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) == string(want) {
		return
	}
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Fatalf("docs/benchmarks.md is stale (run scripts/benchdoc.sh): line %d is\n\t%q\nwant\n\t%q", i+1, gl, wl)
		}
	}
}

const goodReadme = "# Claim A\n\n- Machine: cpu-2vcpu (2 vCPUs)\n- Date: 2026-11-25\nCommand: `chorus bench x`\n\n## Reading\n\nRaw: [run.jsonl](run.jsonl), see [design](../../docs/performance.md).\n"

func TestRender(t *testing.T) {
	for _, c := range []struct {
		name    string
		fs      fstest.MapFS
		wantErr string   // a substring of the error; "" for success
		want    []string // substrings of the page, in this order
	}{
		{
			name: "two folders in name order",
			fs: fstest.MapFS{
				"b-gpu/README.md": {Data: []byte(strings.Replace(goodReadme, "Claim A", "Claim B", 1))},
				"b-gpu/table.md":  {Data: []byte("| x |\n| --- |\n| 2 |\n")},
				"a-cpu/README.md": {Data: []byte(goodReadme)},
				"a-cpu/table.md":  {Data: []byte("| x |\n| --- |\n| 1 |\n\n")},
				"README.md":       {Data: []byte("layout\n")},
			},
			want: []string{
				"# Benchmarks\n",
				"\n## Claim A\n", "\n### Reading\n",
				"[run.jsonl](../bench/results/a-cpu/run.jsonl)", "[design](performance.md)",
				"| 1 |\n\n## Claim B\n", "| 2 |\n",
			},
		},
		{
			name: "code blocks keep their lines",
			fs: fstest.MapFS{
				"a/README.md": {Data: []byte(goodReadme + "\n```sh\n# a comment\nsee [x](y)\n```\n")},
				"a/table.md":  {Data: []byte("t\n")},
			},
			want: []string{"```sh\n# a comment\nsee [x](y)\n```\n"},
		},
		{
			name:    "stray file",
			fs:      fstest.MapFS{"run.jsonl": {Data: []byte("{}")}, "a/README.md": {Data: []byte(goodReadme)}, "a/table.md": {Data: []byte("t")}},
			wantErr: "run.jsonl is a file at the top",
		},
		{name: "no table", fs: fstest.MapFS{"a/README.md": {Data: []byte(goodReadme)}}, wantErr: "bench/results/a: no table.md"},
		{name: "no readme", fs: fstest.MapFS{"a/table.md": {Data: []byte("t")}}, wantErr: "bench/results/a: no README.md"},
		{name: "empty table", fs: fstest.MapFS{"a/README.md": {Data: []byte(goodReadme)}, "a/table.md": {Data: []byte("\n\n")}}, wantErr: "table.md is empty"},
		{name: "no title", fs: fstest.MapFS{"a/README.md": {Data: []byte("Claim\n" + goodReadme)}, "a/table.md": {Data: []byte("t")}}, wantErr: "first line must be"},
		{
			name:    "no machine",
			fs:      fstest.MapFS{"a/README.md": {Data: []byte(strings.Replace(goodReadme, "Machine:", "Host:", 1))}, "a/table.md": {Data: []byte("t")}},
			wantErr: `no line "Machine: ..."`,
		},
		{
			name:    "no command",
			fs:      fstest.MapFS{"a/README.md": {Data: []byte(strings.Replace(goodReadme, "Command:", "Run:", 1))}, "a/table.md": {Data: []byte("t")}},
			wantErr: `no line "Command: ..."`,
		},
		{
			name:    "bad date",
			fs:      fstest.MapFS{"a/README.md": {Data: []byte(strings.Replace(goodReadme, "2026-11-25", "25 Nov", 1))}, "a/table.md": {Data: []byte("t")}},
			wantErr: "does not start with YYYY-MM-DD",
		},
		{
			name:    "impossible date",
			fs:      fstest.MapFS{"a/README.md": {Data: []byte(strings.Replace(goodReadme, "2026-11-25", "2026-13-40", 1))}, "a/table.md": {Data: []byte("t")}},
			wantErr: "Date",
		},
		{name: "nothing", fs: fstest.MapFS{"README.md": {Data: []byte("x")}}, wantErr: "no result folders"},
	} {
		t.Run(c.name, func(t *testing.T) {
			page, err := Render(c.fs)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, ErrLayout) {
					t.Fatalf("err = %v, want ErrLayout containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := string(page)
			at := 0
			for _, w := range c.want {
				i := strings.Index(s[at:], w)
				if i < 0 {
					t.Fatalf("page lacks %q after offset %d:\n%s", w, at, s)
				}
				at += i + len(w)
			}
		})
	}
}
