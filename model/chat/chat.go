package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Message is one chat turn, as passed to apply_chat_template: the template
// sees it as the dict {"role": Role, "content": Content}.
type Message struct {
	Role    string
	Content string
}

// Options are the per-render inputs besides the messages.
type Options struct {
	// AddGenerationPrompt is the add_generation_prompt variable.
	AddGenerationPrompt bool
	// BOS and EOS become bos_token and eos_token; an empty string leaves
	// the variable undefined, as transformers does for an unset token.
	BOS, EOS string
	// Tools, when non-nil, is the tools variable: each entry one JSON
	// object (a tool schema), decoded with its key order kept. Nil passes
	// tools=None, as apply_chat_template does without tools.
	Tools []json.RawMessage
	// Vars are extra template variables (transformers' **kwargs), e.g.
	// date_string, enable_thinking, builtin_tools. Values may be nil,
	// bool, any integer or float type, string, []any, []string,
	// map[string]any (keys sorted), json.RawMessage (key order kept) or
	// []Message.
	Vars map[string]any
	// Now is the clock strftime_now reads; nil means time.Now. Like
	// transformers, the wall-clock time of its location is used.
	Now func() time.Time
}

// Template is a parsed chat template. It is immutable and safe for
// concurrent use.
type Template struct {
	nodes     []node
	maxSteps  int
	maxOutput int
}

// Parse parses a chat template. It refuses what the package does not
// support (with an error matching ErrUnsupported that names the construct
// and its line) and reports Jinja syntax errors as *SyntaxError.
func Parse(source string) (t *Template, err error) {
	defer func() {
		if p := recover(); p != nil {
			t, err = nil, fmt.Errorf("chat: parse template: internal error: %v", p)
		}
	}()
	toks, err := lex(source)
	if err != nil {
		return nil, fmt.Errorf("chat: parse template: %w", err)
	}
	nodes, err := parseTemplate(toks)
	if err != nil {
		return nil, fmt.Errorf("chat: parse template: %w", err)
	}
	return &Template{nodes: nodes, maxSteps: defaultMaxSteps, maxOutput: defaultMaxOutput}, nil
}

// reserved are the variables Render sets itself.
var reserved = []string{"messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token"}

// Render renders the template like transformers'
// tokenizer.apply_chat_template(messages, tokenize=False,
// add_generation_prompt=opts.AddGenerationPrompt, **opts.Vars).
// A raise_exception in the template returns a *RaiseError.
func (t *Template) Render(messages []Message, opts Options) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = "", fmt.Errorf("chat: render template: internal error: %v", p)
		}
	}()
	vars, err := renderVars(messages, opts)
	if err != nil {
		return "", fmt.Errorf("chat: render template: %w", err)
	}
	return t.execute(vars, opts.Now)
}

func renderVars(messages []Message, opts Options) (map[string]Value, error) {
	vars := map[string]Value{
		"messages":              messagesValue(messages),
		"tools":                 nil,
		"documents":             nil,
		"add_generation_prompt": opts.AddGenerationPrompt,
	}
	if opts.BOS != "" {
		vars["bos_token"] = opts.BOS
	}
	if opts.EOS != "" {
		vars["eos_token"] = opts.EOS
	}
	if opts.Tools != nil {
		tools := make([]Value, 0, len(opts.Tools))
		for i, raw := range opts.Tools {
			v, err := decodeJSON(raw)
			if err != nil {
				return nil, fmt.Errorf("tool %d: %w", i, err)
			}
			tools = append(tools, v)
		}
		vars["tools"] = tools
	}
	for name, v := range opts.Vars {
		if slices.Contains(reserved, name) {
			return nil, fmt.Errorf("variable %q is set by Render itself", name)
		}
		val, err := toValue(v, 0)
		if err != nil {
			return nil, fmt.Errorf("variable %q: %w", name, err)
		}
		vars[name] = val
	}
	return vars, nil
}

func messagesValue(messages []Message) []Value {
	out := make([]Value, len(messages))
	for i, m := range messages {
		d := newDict()
		d.set("role", m.Role)
		d.set("content", m.Content)
		out[i] = d
	}
	return out
}

// toValue converts a Go value from Options.Vars into a template value.
func toValue(v any, depth int) (Value, error) {
	if depth > maxNesting {
		return nil, errors.New("value nested too deeply")
	}
	switch v := v.(type) {
	case nil:
		return nil, nil
	case bool, string, int64, float64:
		return v, nil
	case int:
		return int64(v), nil
	case int8, int16, int32, uint8, uint16, uint32:
		return reflect.ValueOf(v).Convert(reflect.TypeFor[int64]()).Int(), nil
	case uint, uint64:
		u := reflect.ValueOf(v).Uint()
		if u > math.MaxInt64 {
			return nil, fmt.Errorf("integer %d beyond 64 bits: %w", u, ErrUnsupported)
		}
		return int64(u), nil
	case float32:
		return float64(v), nil
	case json.RawMessage:
		return decodeJSON(v)
	case []string:
		return stringsToValues(v), nil
	case []Message:
		return messagesValue(v), nil
	case []any:
		out := make([]Value, len(v))
		for i, e := range v {
			var err error
			if out[i], err = toValue(e, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		d := newDict()
		for _, k := range keys {
			e, err := toValue(v[k], depth+1)
			if err != nil {
				return nil, err
			}
			d.set(k, e)
		}
		return d, nil
	}
	return nil, fmt.Errorf("unsupported Go type %T", v)
}

// execute renders the template with the given top-level variables.
func (t *Template) execute(vars map[string]Value, now func() time.Time) (string, error) {
	if now == nil {
		now = time.Now
	}
	var b strings.Builder
	r := &renderer{w: &b, maxSteps: t.maxSteps, maxOutput: t.maxOutput, now: now}
	root := newScope(globalScope())
	for k, v := range vars {
		root.vars[k] = v
	}
	if err := r.exec(t.nodes, root); err != nil {
		var cf *ctrlFlow
		if errors.As(err, &cf) {
			return "", errors.New("chat: render template: break/continue outside of a loop")
		}
		return "", fmt.Errorf("chat: render template: %w", err)
	}
	return b.String(), nil
}
