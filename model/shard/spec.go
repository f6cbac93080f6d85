package shard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/chorus-rt/chorus/tensor"
)

// Rule says how the tensors it matches are sharded. Exactly one of Match
// and Regex, and exactly one of Replicate, Split and Func.
type Rule struct {
	// Match is an exact name or a glob: "*" matches within one
	// dot-separated part of the name ("layers.*.attn.wq" matches
	// "layers.7.attn.wq"), "**" matches anything, dots included.
	Match string `json:"match,omitempty"`
	// Regex is a regular expression (RE2) matched against the whole name.
	Regex string `json:"regex,omitempty"`

	Replicate bool `json:"replicate,omitempty"`
	// Split is the dimension split into N equal parts (0: rows, 1:
	// columns; negative counts from the end).
	Split *int `json:"split,omitempty"`
	// Func names a registered function (Register); Args are passed to it.
	Func string  `json:"func,omitempty"`
	Args []int64 `json:"args,omitempty"`

	// DType, if set, is the dtype the checkpoint must hold (ErrDType
	// otherwise): "float32", "bfloat16", ... (tensor.ParseDType names).
	DType string `json:"dtype,omitempty"`
	// Convert, if set, is "float32", "float16" or "bfloat16": tensors of
	// another of these three dtypes are converted as they are loaded
	// (through float32, which holds every float16 and bfloat16 value
	// exactly; narrowing rounds to nearest even); tensors already of that
	// dtype load as they are; other dtypes are an error.
	Convert string `json:"convert,omitempty"`
}

// Spec is an ordered list of rules: the first rule that matches a
// tensor's name decides. Tensors no rule matches are replicated, or
// refused when Default is "error".
type Spec struct {
	Rules   []Rule `json:"rules"`
	Default string `json:"default,omitempty"` // "replicate" (or empty) | "error"
}

// ParseSpec reads a spec from JSON, strictly (unknown fields are errors),
// and checks it (Compile).
func ParseSpec(js []byte) (*Spec, error) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSpec, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrSpec)
	}
	if _, err := s.compile(); err != nil {
		return nil, err
	}
	return &s, nil
}

// JSON is the spec's JSON form (what chorus.shard.open takes).
func (s *Spec) JSON() ([]byte, error) { return json.Marshal(s) }

type action int

const (
	actReplicate action = iota
	actSplit
	actFunc
)

type rule struct {
	index   int
	desc    string
	re      *regexp.Regexp
	exact   string
	act     action
	dim     int
	fn      Func
	fname   string
	args    []int64
	dtype   tensor.DType // expected, Invalid: any
	convert tensor.DType // Invalid: none
}

type compiled struct {
	rules        []*rule
	defaultError bool
}

func (s *Spec) compile() (*compiled, error) {
	c := &compiled{}
	switch s.Default {
	case "", "replicate":
	case "error":
		c.defaultError = true
	default:
		return nil, fmt.Errorf("%w: default %q: want \"replicate\" or \"error\"", ErrSpec, s.Default)
	}
	for i, r := range s.Rules {
		cr, err := compileRule(i, r)
		if err != nil {
			return nil, err
		}
		c.rules = append(c.rules, cr)
	}
	return c, nil
}

func compileRule(i int, r Rule) (*rule, error) {
	cr := &rule{index: i, args: r.Args}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: rule %d (%s): %s", ErrSpec, i, cr.desc, fmt.Sprintf(format, a...))
	}
	switch {
	case r.Match != "" && r.Regex != "":
		cr.desc = fmt.Sprintf("match %q, regex %q", r.Match, r.Regex)
		return nil, bad("give match or regex, not both")
	case r.Match != "":
		cr.desc = fmt.Sprintf("match %q", r.Match)
		if !strings.Contains(r.Match, "*") {
			cr.exact = r.Match
		} else {
			cr.re = regexp.MustCompile("^" + globToRegexp(r.Match) + "$")
		}
	case r.Regex != "":
		cr.desc = fmt.Sprintf("regex %q", r.Regex)
		re, err := regexp.Compile("^(?:" + r.Regex + ")$")
		if err != nil {
			return nil, bad("%v", err)
		}
		cr.re = re
	default:
		cr.desc = "no pattern"
		return nil, bad("give match or regex")
	}
	n := 0
	if r.Replicate {
		n++
		cr.act = actReplicate
	}
	if r.Split != nil {
		n++
		cr.act, cr.dim = actSplit, *r.Split
	}
	if r.Func != "" {
		n++
		fn, err := LookupFunc(r.Func)
		if err != nil {
			return nil, bad("%v", err)
		}
		cr.act, cr.fn, cr.fname = actFunc, fn, r.Func
	}
	if n != 1 {
		return nil, bad("give exactly one of replicate, split, func (got %d)", n)
	}
	if len(r.Args) > 0 && r.Func == "" {
		return nil, bad("args without func")
	}
	if r.DType != "" {
		dt, err := tensor.ParseDType(r.DType)
		if err != nil {
			return nil, bad("dtype: %v", err)
		}
		cr.dtype = dt
	}
	if r.Convert != "" {
		dt, err := tensor.ParseDType(r.Convert)
		if err != nil || !Convertible(dt) {
			return nil, bad("convert %q: chorus converts between float32, float16 and bfloat16 only", r.Convert)
		}
		cr.convert = dt
	}
	return cr, nil
}

// globToRegexp: "*" is one dot-free run, "**" anything; the rest literal.
func globToRegexp(g string) string {
	var b strings.Builder
	for i := 0; i < len(g); {
		if strings.HasPrefix(g[i:], "**") {
			b.WriteString(".*")
			i += 2
			continue
		}
		if g[i] == '*' {
			b.WriteString("[^.]*")
			i++
			continue
		}
		j := strings.IndexByte(g[i:], '*')
		if j < 0 {
			j = len(g) - i
		}
		b.WriteString(regexp.QuoteMeta(g[i : i+j]))
		i += j
	}
	return b.String()
}

func (r *rule) matches(name string) bool {
	if r.re == nil {
		return name == r.exact
	}
	return r.re.MatchString(name)
}

// find returns the first rule matching name, or nil.
func (c *compiled) find(name string) *rule {
	for _, r := range c.rules {
		if r.matches(name) {
			return r
		}
	}
	return nil
}
