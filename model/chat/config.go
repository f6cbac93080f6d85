package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Config is what FromTokenizerConfig reads from a tokenizer_config.json.
type Config struct {
	// Template is the default chat template, parsed.
	Template *Template
	// Source is the default template's text.
	Source string
	// Named holds every template of the list form
	// ([{"name": ..., "template": ...}]), including "default"; it is
	// nil for the single-string form.
	Named map[string]string
	// BOS and EOS are bos_token and eos_token ("" when unset).
	BOS, EOS string
}

// Options returns Options with BOS and EOS filled in from the config.
func (c *Config) Options() Options { return Options{BOS: c.BOS, EOS: c.EOS} }

// Render renders the default template with BOS and EOS taken from the
// config where opts leaves them empty.
func (c *Config) Render(messages []Message, opts Options) (string, error) {
	if opts.BOS == "" {
		opts.BOS = c.BOS
	}
	if opts.EOS == "" {
		opts.EOS = c.EOS
	}
	return c.Template.Render(messages, opts)
}

// LoadTokenizerConfig reads a tokenizer_config.json file.
func LoadTokenizerConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("chat: load tokenizer config: %w", err)
	}
	c, err := FromTokenizerConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return c, nil
}

// FromTokenizerConfig reads chat_template (a string, or a list of
// {"name", "template"} objects of which "default" is taken), bos_token and
// eos_token (a string or an {"content": ...} object) from the contents of
// a tokenizer_config.json, and parses the template.
func FromTokenizerConfig(data []byte) (*Config, error) {
	var raw struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("chat: tokenizer config: %w", err)
	}
	c := &Config{}
	var err error
	if c.BOS, err = specialToken(raw.BOS); err != nil {
		return nil, fmt.Errorf("chat: tokenizer config: bos_token: %w", err)
	}
	if c.EOS, err = specialToken(raw.EOS); err != nil {
		return nil, fmt.Errorf("chat: tokenizer config: eos_token: %w", err)
	}
	if c.Source, c.Named, err = chatTemplateSource(raw.ChatTemplate); err != nil {
		return nil, fmt.Errorf("chat: tokenizer config: chat_template: %w", err)
	}
	if c.Template, err = Parse(c.Source); err != nil {
		return nil, err
	}
	return c, nil
}

// specialToken decodes a token given as a string, an AddedToken object
// {"content": ...}, or null.
func specialToken(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("neither a string nor an object: %w", err)
	}
	if obj.Content == nil {
		return "", errors.New(`object without "content"`)
	}
	return *obj.Content, nil
}

func chatTemplateSource(raw json.RawMessage) (string, map[string]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, errors.New("missing (newer models may ship it as chat_template.jinja)")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil, nil
	}
	var list []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", nil, fmt.Errorf("neither a string nor a list of {name, template}: %w", err)
	}
	named := map[string]string{}
	for i, e := range list {
		if e.Name == nil || e.Template == nil {
			return "", nil, fmt.Errorf("entry %d lacks name or template", i)
		}
		named[*e.Name] = *e.Template
	}
	def, ok := named["default"]
	if !ok {
		return "", nil, errors.New(`list form has no "default" template`)
	}
	return def, named, nil
}
