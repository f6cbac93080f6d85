package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/chorus-rt/chorus/internal/config"
)

func main() {
	out := flag.String("out", "docs/configuration.md", "the page to write")
	check := flag.Bool("check", false, "only compare: exit 1 when -out differs from what would be written")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "confdoc: unexpected arguments %q (flags: -out, -check)\n", flag.Args())
		os.Exit(2)
	}
	page := config.Markdown()
	if *check {
		old, err := os.ReadFile(*out)
		if err != nil {
			fmt.Fprintf(os.Stderr, "confdoc: -check: %v\n", err)
			os.Exit(1)
		}
		if !bytes.Equal(old, page) {
			fmt.Fprintf(os.Stderr, "confdoc: %s is stale: run go run ./cmd/confdoc\n", *out)
			os.Exit(1)
		}
		return
	}
	if err := os.WriteFile(*out, page, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "confdoc: %v\n", err)
		os.Exit(1)
	}
}
