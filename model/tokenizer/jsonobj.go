package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// jobj is a JSON object of tokenizer.json with the path it sits at, for
// error messages.
type jobj struct {
	path string
	m    map[string]json.RawMessage
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func parseObj(path string, raw json.RawMessage) (*jobj, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: not a JSON object: %w", path, err)
	}
	if m == nil {
		return nil, fmt.Errorf("tokenizer: %s: not a JSON object", path)
	}
	return &jobj{path, m}, nil
}

func (o *jobj) field(key string) string { return o.path + "." + key }

// get decodes key into v; it reports false when the key is absent or null.
func (o *jobj) get(key string, v any) (bool, error) {
	raw, ok := o.m[key]
	if !ok || isNull(raw) {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("tokenizer: %s: %w", o.field(key), err)
	}
	return true, nil
}

func (o *jobj) typ() (string, error) {
	var t string
	ok, err := o.get("type", &t)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("tokenizer: %s has no \"type\"", o.path)
	}
	return t, nil
}

func (o *jobj) str(key, def string) (string, error) {
	s := def
	_, err := o.get(key, &s)
	return s, err
}

func (o *jobj) requiredStr(key string) (string, error) {
	var s string
	ok, err := o.get(key, &s)
	if err == nil && !ok {
		err = fmt.Errorf("tokenizer: %s is missing", o.field(key))
	}
	return s, err
}

func (o *jobj) boolean(key string, def bool) (bool, error) {
	b := def
	_, err := o.get(key, &b)
	return b, err
}

func (o *jobj) integer(key string, def int) (int, error) {
	n := def
	_, err := o.get(key, &n)
	return n, err
}

// char reads a one-character string.
func (o *jobj) char(key string, def rune) (rune, error) {
	s, err := o.str(key, string(def))
	if err != nil {
		return 0, err
	}
	r := []rune(s)
	if len(r) != 1 {
		return 0, fmt.Errorf("tokenizer: %s %q is not one character", o.field(key), s)
	}
	return r[0], nil
}

// list reads an array of raw values.
func (o *jobj) list(key string) ([]json.RawMessage, error) {
	var l []json.RawMessage
	_, err := o.get(key, &l)
	return l, err
}

// pattern reads a {"String": s} or {"Regex": r} pattern.
func (o *jobj) pattern(key string) (lit string, isRegex bool, err error) {
	var p map[string]string
	ok, err := o.get(key, &p)
	if err != nil {
		return "", false, err
	}
	if !ok || len(p) != 1 {
		return "", false, fmt.Errorf("tokenizer: %s must be {\"String\": ...} or {\"Regex\": ...}", o.field(key))
	}
	if s, ok := p["String"]; ok {
		return s, false, nil
	}
	if r, ok := p["Regex"]; ok {
		return r, true, nil
	}
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return "", false, unsupported(o.field(key), strings.Join(keys, ","), "String", "Regex")
}
