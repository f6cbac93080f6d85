package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

func main() {
	results := flag.String("results", "bench/results", "the curated results `folder`")
	out := flag.String("out", "docs/benchmarks.md", "the page to write")
	check := flag.Bool("check", false, "only compare: exit 1 when -out differs from what would be written")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "benchdoc: unexpected arguments %q (flags: -results, -out, -check)\n", flag.Args())
		os.Exit(2)
	}
	page, err := Render(os.DirFS(*results))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *check {
		old, err := os.ReadFile(*out)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchdoc: -check: %v\n", err)
			os.Exit(1)
		}
		if !bytes.Equal(old, page) {
			fmt.Fprintf(os.Stderr, "benchdoc: %s is stale: run scripts/benchdoc.sh\n", *out)
			os.Exit(1)
		}
		return
	}
	if err := os.WriteFile(*out, page, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "benchdoc: %v\n", err)
		os.Exit(1)
	}
}
