package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/chorus-rt/chorus/cluster/node"
	"github.com/chorus-rt/chorus/internal/config"
	"github.com/chorus-rt/chorus/net/cert"
	"github.com/chorus-rt/chorus/net/link"
	"github.com/chorus-rt/chorus/runtime/session"
)

// launchEnv is what a node agent takes from its launcher's environment
// when flags do not say: chorus's own variables first, then torchrun's,
// then Slurm's (docs/multi-host.md).
type launchEnv struct {
	Connect  string
	NodeRank int // -1: unset
	Nodes    int // 0: unset
	Workers  int // 0: unset
	Files    link.Files
}

// launcherEnv reads a variable of the agent's launcher: chorus's own
// through internal/config, the launchers' (torchrun, Slurm) as they are.
func launcherEnv(name string) string {
	if v, ok := config.Lookup(name); ok {
		return config.Process().Get(&v)
	}
	return os.Getenv(name)
}

func firstEnv(get func(string) string, names ...string) string {
	for _, n := range names {
		if v := get(n); v != "" {
			return v
		}
	}
	return ""
}

func fromEnv(get func(string) string) (launchEnv, error) {
	e := launchEnv{NodeRank: -1}
	e.Connect = get("CHORUS_CONTROLLER")
	if e.Connect == "" && get("MASTER_ADDR") != "" && get("MASTER_PORT") != "" {
		e.Connect = net.JoinHostPort(get("MASTER_ADDR"), get("MASTER_PORT"))
	}
	num := func(what string, names ...string) (int, error) {
		v := firstEnv(get, names...)
		if v == "" {
			return -1, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%s from the environment (%v): %q", what, names, v)
		}
		return n, nil
	}
	var err error
	if e.NodeRank, err = num("node rank", "CHORUS_NODE_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_NODEID"); err != nil {
		return e, err
	}
	if e.Nodes, err = num("number of nodes", "CHORUS_NNODES", "NNODES", "SLURM_NNODES"); err != nil {
		return e, err
	}
	if e.Workers, err = num("workers per node", "CHORUS_WORKERS_PER_NODE", "NPROC_PER_NODE", "LOCAL_WORLD_SIZE"); err != nil {
		return e, err
	}
	e.Nodes, e.Workers = max(e.Nodes, 0), max(e.Workers, 0)
	e.Files = link.Files{CA: get("CHORUS_CA"), Cert: get("CHORUS_CERT"), Key: get("CHORUS_KEY"), Token: get("CHORUS_TOKEN_FILE")}
	return e, nil
}

// credFlags adds the credential flags shared by node and cluster.
func credFlags(fs interface {
	StringVar(*string, string, string, string)
}, f *link.Files) {
	fs.StringVar(&f.CA, "ca", f.CA, "cluster CA certificate (PEM; env CHORUS_CA)")
	fs.StringVar(&f.Cert, "cert", f.Cert, "this host's certificate (env CHORUS_CERT)")
	fs.StringVar(&f.Key, "key", f.Key, "its private key (env CHORUS_KEY)")
	fs.StringVar(&f.Token, "token-file", f.Token, "pre-shared token file (env CHORUS_TOKEN_FILE)")
}

func cmdNode(ctx context.Context, args []string, out, errOut io.Writer) error {
	env, err := fromEnv(launcherEnv)
	if err != nil {
		return usageError{"node: " + err.Error()}
	}
	plain, err := config.Process().Bool(config.Plaintext)
	if err != nil {
		return usageError{"node: " + err.Error()}
	}
	fs := newFlags("node", "chorus node --connect HOST:PORT --workers N [--node-rank R] (--token-file F | --ca CA --cert C --key K)", out)
	connect := fs.String("connect", env.Connect, "controller address (env CHORUS_CONTROLLER, or MASTER_ADDR:MASTER_PORT)")
	workers := fs.Int("workers", env.Workers, "worker processes on this host (env CHORUS_WORKERS_PER_NODE, NPROC_PER_NODE, LOCAL_WORLD_SIZE)")
	rank := fs.Int("node-rank", env.NodeRank, "this host's node rank, -1 for the next free one (env CHORUS_NODE_RANK, NODE_RANK, SLURM_NODEID)")
	nodes := fs.Int("nodes", env.Nodes, "number of nodes, to check the rank (env CHORUS_NNODES, NNODES, SLURM_NNODES)")
	program := fs.String("program", "", "worker executable (default: this chorus binary)")
	timeout := fs.Duration("connect-timeout", 120*time.Second, "how long to look for the controller")
	files := env.Files
	credFlags(fs, &files)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *connect == "":
		return usageError{"node: --connect HOST:PORT is required"}
	case *workers < 1 || *workers > session.MaxProcessWorkers:
		return badFlag("node", "workers", *workers, fmt.Sprintf("want 1 to %d worker processes on this host (required)", session.MaxProcessWorkers))
	case *rank < -1:
		return badFlag("node", "node-rank", *rank, "want -1 (the next free one) or a rank >= 0")
	case *nodes > 0 && *rank >= *nodes:
		return badFlag("node", "node-rank", *rank, fmt.Sprintf("want -1 or a rank below --nodes %d", *nodes))
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	o := node.Options{Connect: *connect, NodeRank: *rank, Workers: *workers, Program: *program, Files: files, Plaintext: plain,
		ConnectTimeout: *timeout, Stderr: errOut, Log: func(s string) { fmt.Fprintln(errOut, s) }}
	if *program == "" {
		o.Args = []string{"worker"}
	}
	return node.Run(ctx, o)
}

func cmdCert(args []string, out io.Writer) error {
	if len(args) == 0 {
		return usageError{"cert: which? ca, node or token (chorus cert --help)"}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(out, `Usage:
  chorus cert ca    --dir DIR [--days 365]              DIR/ca.pem, DIR/ca-key.pem (DIR made, mode 0700, if its parent exists)
  chorus cert node  --dir DIR --name NAME [--host H]... DIR/NAME.pem, DIR/NAME-key.pem (signed by DIR/ca)
  chorus cert token -o FILE                             a random 32-byte token (hex)

Existing files are never overwritten.
`)
		return nil
	}
	switch args[0] {
	case "ca", "node", "token":
	default:
		return usageError{fmt.Sprintf("cert: unknown %q: want ca, node or token (chorus cert --help)", args[0])}
	}
	fs := newFlags("cert "+args[0], "chorus cert "+args[0]+" [flags]", out)
	dir := fs.String("dir", ".", "directory of the cluster's credentials")
	days := fs.Int("days", 365, "validity in days")
	name := fs.String("name", "node", "certificate name (node)")
	outFile := fs.String("o", "", "output file (token)")
	var hosts multiFlag
	fs.Var(&hosts, "host", "extra DNS name or IP the node certificate names (repeatable)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	cmd := "cert " + args[0]
	if *days < 1 {
		return badFlag(cmd, "days", *days, "want 1 or more")
	}
	if *name == "" || strings.ContainsAny(*name, `/\`) || *name == "ca" {
		return badFlag(cmd, "name", *name, "want a plain file name other than ca (no folders)")
	}
	valid := time.Duration(*days) * 24 * time.Hour
	now := time.Now().Add(-5 * time.Minute) // tolerate small clock skew
	switch args[0] {
	case "ca":
		if err := credDir(cmd, *dir); err != nil {
			return err
		}
		if err := refuseExisting(cmd, filepath.Join(*dir, "ca.pem"), filepath.Join(*dir, "ca-key.pem")); err != nil {
			return err
		}
		ca, err := cert.NewCA("chorus cluster CA", now, valid)
		if err != nil {
			return err
		}
		c, k, err := ca.Write(*dir, "ca")
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s and %s (keep the key private; it admits hosts to the cluster)\n", c, k)
	case "node":
		ca, err := cert.Load(*dir+"/ca.pem", *dir+"/ca-key.pem")
		if err != nil {
			return err
		}
		if err := refuseExisting(cmd, filepath.Join(*dir, *name+".pem"), filepath.Join(*dir, *name+"-key.pem")); err != nil {
			return err
		}
		n, err := ca.Issue(*name, hosts, now, valid)
		if err != nil {
			return err
		}
		c, k, err := n.Write(*dir, *name)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s and %s\n", c, k)
	case "token":
		if *outFile == "" {
			return usageError{"cert token: -o FILE is required"}
		}
		if err := refuseExisting(cmd, *outFile); err != nil {
			return err
		}
		if err := cert.NewToken(*outFile); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", *outFile)
	}
	return nil
}

// credDir makes the credentials folder dir (mode 0700) when its parent
// exists; a missing parent is an error naming it.
func credDir(cmd, dir string) error {
	st, err := os.Stat(dir)
	if err == nil {
		if !st.IsDir() {
			return badFlag(cmd, "dir", dir, "not a folder")
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: --dir %s: %w", cmd, dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return badFlag(cmd, "dir", dir, fmt.Sprintf("its parent folder %s does not exist (only the last folder is made)", filepath.Dir(filepath.Clean(dir))))
		}
		return fmt.Errorf("%s: --dir %s: %w", cmd, dir, err)
	}
	return nil
}

// refuseExisting fails when any of files exists, naming it: credentials
// are never overwritten (and none is written when one would be).
func refuseExisting(cmd string, files ...string) error {
	for _, f := range files {
		if _, err := os.Lstat(f); err == nil {
			return fmt.Errorf("%s: %s exists; chorus never overwrites credentials (move it away, or give another --dir or -o)", cmd, f)
		}
	}
	return nil
}

type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
