package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Class says who sets a variable.
type Class uint8

const (
	// User: set by the person running a program.
	User Class = iota
	// Internal: set by a chorus parent for its child processes; not
	// part of the user surface and free to change between versions.
	Internal
	// Test: read by tests and test helpers only.
	Test
)

// Var is one environment variable.
type Var struct {
	// Name is the variable, CHORUS_ and upper-case words.
	Name string
	// Default is what an unset variable means, as the page shows it.
	Default string
	// Meaning says what the value does (Markdown, one line).
	Meaning string
	// Reader names the packages or commands that read it.
	Reader string
	// Class says who sets it.
	Class Class
}

// ErrBadValue: a variable holds a value its reader cannot use.
var ErrBadValue = errors.New("config: bad environment variable")

var table []*Var

func define(v Var) *Var {
	for _, o := range table {
		if o.Name == v.Name {
			panic("config: " + v.Name + " defined twice")
		}
	}
	p := &v
	table = append(table, p)
	return p
}

// Vars returns the table, in the order the page lists it.
func Vars() []Var {
	out := make([]Var, len(table))
	for i, v := range table {
		out[i] = *v
	}
	return out
}

// Lookup returns the variable named name.
func Lookup(name string) (Var, bool) {
	for _, v := range table {
		if v.Name == name {
			return *v, true
		}
	}
	return Var{}, false
}

// Env is a snapshot of a process environment, the variables of the
// table only.
type Env struct{ m map[string]string }

// Process reads this process's environment. Edges call it when they
// decide (a session constructor, the CLI, a process-wide setting's first
// use), not on hot paths.
func Process() Env { return FromList(os.Environ()) }

// FromList makes an Env of NAME=VALUE pairs (os.Environ's form; the
// last of repeated names wins). Variables outside the table are left out.
func FromList(kv []string) Env {
	e := Env{m: map[string]string{}}
	for _, s := range kv {
		k, v, ok := strings.Cut(s, "=")
		if !ok || !strings.HasPrefix(k, "CHORUS_") {
			continue
		}
		if _, known := Lookup(k); known {
			e.m[k] = v
		}
	}
	return e
}

// Get returns v's value; "" when unset.
func (e Env) Get(v *Var) string { return e.m[v.Name] }

// Bool reads a 0/1 switch: unset, "" or "0" is false, "1" true.
func (e Env) Bool(v *Var) (bool, error) {
	switch s := e.m[v.Name]; s {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("%w: %s=%q: want 0 or 1", ErrBadValue, v.Name, s)
	}
}

// Duration reads a Go duration ("10s", "250ms"); set is false when the
// variable is unset or empty.
func (e Env) Duration(v *Var) (d time.Duration, set bool, err error) {
	s := e.m[v.Name]
	if s == "" {
		return 0, false, nil
	}
	d, err = time.ParseDuration(s)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %s=%q: want a Go duration such as 10s or 250ms", ErrBadValue, v.Name, s)
	}
	return d, true, nil
}

// Int reads an integer of at least min; set is false when the variable
// is unset or empty.
func (e Env) Int(v *Var, min int) (n int, set bool, err error) {
	s := e.m[v.Name]
	if s == "" {
		return 0, false, nil
	}
	n, err = strconv.Atoi(s)
	if err != nil || n < min {
		return 0, false, fmt.Errorf("%w: %s=%q: want an integer of at least %d", ErrBadValue, v.Name, s, min)
	}
	return n, true, nil
}

// Choice reads one of the values in choices; "" when unset.
func (e Env) Choice(v *Var, choices ...string) (string, error) {
	s := e.m[v.Name]
	if s == "" {
		return "", nil
	}
	for _, c := range choices {
		if s == c {
			return s, nil
		}
	}
	return "", fmt.Errorf("%w: %s=%q: want %s", ErrBadValue, v.Name, s, strings.Join(choices, ", "))
}

// Assign is the NAME=VALUE pair that sets v in a child's environment.
func (v *Var) Assign(value string) string { return v.Name + "=" + value }

// With returns e with the variables of kv (NAME=VALUE, os.Environ's
// form) set on top: a process session's ProcessOptions.Env over the
// controller's environment.
func (e Env) With(kv []string) Env {
	out := Env{m: make(map[string]string, len(e.m))}
	for k, v := range e.m {
		out.m[k] = v
	}
	for k, v := range FromList(kv).m {
		out.m[k] = v
	}
	return out
}

// Unknown lists the CHORUS_ variables of kv (os.Environ's form) that the
// table lacks: a misspelt name, or a setting that was removed (its
// measured choice is now the code); the chorus command warns about them
// rather than let them pass for settings.
func Unknown(kv []string) []string {
	var out []string
	for _, s := range kv {
		k, _, _ := strings.Cut(s, "=")
		if _, known := Lookup(k); strings.HasPrefix(k, "CHORUS_") && !known {
			out = append(out, k)
		}
	}
	return out
}

// Inherited is the environment a child process inherits (os.Environ):
// the user's variables pass through to a program's workers, which read
// none of chorus's but their spec.
func Inherited() []string { return os.Environ() }
